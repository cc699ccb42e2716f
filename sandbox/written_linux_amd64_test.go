package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tracker returns the process's write tracker, or skips the test where
// the kernel has none.
func tracker(t *testing.T) *writeTracker {
	w := openTracker()
	if w == nil {
		t.Skipf("the kernel does not track writes: %v", trackerErr)
	}
	return w
}

// TestWriteTrackerReportsWrites: the pages written since the last report,
// from any goroutine, exactly; none twice; none after unwatch.
func TestWriteTrackerReportsWrites(t *testing.T) {
	tr := tracker(t)
	buf := make([]byte, 4<<20) // a large allocation: page-aligned
	for i := range buf {
		buf[i] = byte(i)
	}
	w, err := tr.watch(buf)
	require.NoError(t, err)
	defer tr.unwatch(w)

	pages, err := tr.written(w, nil)
	require.NoError(t, err)
	assert.Empty(t, pages, "watch protects what was there")

	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 5 {
		want := map[uint32]bool{}
		var wg sync.WaitGroup
		for g := range 4 {
			var mine []uint32
			for range 50 {
				p := uint32(rng.IntN(len(buf) / pageSize))
				want[p] = true
				mine = append(mine, p)
			}
			wg.Go(func() {
				for _, p := range mine {
					buf[int(p)*pageSize+g*7+round]++
				}
			})
		}
		wg.Wait()
		pages, err = tr.written(w, pages[:0])
		require.NoError(t, err)
		got := map[uint32]bool{}
		for _, p := range pages {
			assert.False(t, got[p], "page %d reported twice", p)
			got[p] = true
		}
		assert.Equal(t, want, got, "round %d", round)
	}
	// Writes the kernel makes for the process (a read(2) into the
	// buffer) are writes too.
	var fds [2]int
	require.NoError(t, syscall.Pipe2(fds[:], syscall.O_CLOEXEC))
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	_, err = syscall.Write(fds[1], []byte("kernel"))
	require.NoError(t, err)
	_, err = syscall.Read(fds[0], buf[9*pageSize+100:9*pageSize+106])
	require.NoError(t, err)
	pages, err = tr.written(w, pages[:0])
	require.NoError(t, err)
	assert.Equal(t, []uint32{9}, pages)

	// Reads are not writes.
	sum := 0
	for _, b := range buf {
		sum += int(b)
	}
	require.Positive(t, sum)
	pages, err = tr.written(w, pages[:0])
	require.NoError(t, err)
	assert.Empty(t, pages)

	tr.unwatch(w)
	buf[0]++
	_, err = tr.written(w, nil)
	assert.Error(t, err, "an unwatched range is refused, not reported as unwritten")
}

// always makes the test's sessions track their writes whatever tracking
// costs this machine.
func always(t *testing.T) {
	trackWrites = trackAlways
	t.Cleanup(func() { trackWrites = trackAuto })
}

// TestTrackingCost: the process measures what tracking costs it, and
// tracks only where that pays, or where told to.
func TestTrackingCost(t *testing.T) {
	tr := tracker(t)
	require.NoError(t, trackCost.err)
	assert.Positive(t, trackCost.fault)
	assert.Positive(t, trackCost.compare)
	t.Logf("tracking costs %v (pays: %v)", trackCost, trackCost.pays())

	us := func(f float64) time.Duration { return time.Duration(f * float64(time.Microsecond)) }
	assert.True(t, trackingCost{fault: us(0.85), compare: us(0.1)}.pays())
	assert.False(t, trackingCost{fault: us(15), compare: us(0.1)}.pays())
	assert.False(t, trackingCost{fault: us(0.85), compare: us(0.1), err: errors.New("refused")}.pays())

	saved := trackCost
	defer func() { trackCost, trackWrites = saved, trackAuto }()
	trackCost = trackingCost{fault: us(15), compare: us(0.1)}
	assert.Nil(t, writes(), "slow faults: compare all of memory")
	trackCost = trackingCost{fault: us(0.5), compare: us(0.1)}
	assert.Same(t, tr, writes())
	trackWrites = trackOff
	assert.Nil(t, writes())
	trackCost = trackingCost{fault: us(15), compare: us(0.1)}
	trackWrites = trackAlways
	assert.Same(t, tr, writes())
}

// TestWriteTrackerRefusesUnaligned: a memory that does not start on a page
// is not tracked (its checkpoints compare all of it).
func TestWriteTrackerRefusesUnaligned(t *testing.T) {
	tr := tracker(t)
	buf := make([]byte, 1<<20)
	_, err := tr.watch(buf[100:])
	assert.Error(t, err)
	_, err = tr.watch(buf[:0:100])
	assert.Error(t, err)
}

// checkpointHolds reports the first page where mem differs from what the
// checkpoint says it holds (dead pages aside).
func checkpointHolds(ck *checkpoint, base *baseImage, mem []byte, dead int) error {
	if ck.size != uint64(len(mem)) {
		return fmt.Errorf("checkpoint of %d bytes, memory of %d", ck.size, len(mem))
	}
	for i := dead; i < len(mem)/pageSize; i++ {
		want := ck.pages[i]
		if want == nil {
			if want = base.page(i); want == nil {
				want = zeroPage
			}
		}
		if !bytes.Equal(mem[i*pageSize:(i+1)*pageSize], want) {
			return fmt.Errorf("page %d differs", i)
		}
	}
	return nil
}

// TestCheckpointsHoldTheMemory is what neither the tracking nor the
// skipping of unpopulated pages may get wrong: after each run of a
// session, whatever the run wrote (small changes, a grown memory within
// and past its capacity, writes the host makes for the guest: reads of
// files, of stdin), the checkpoint holds the memory exactly, and a
// stopped run rolls back to it.
func TestCheckpointsHoldTheMemory(t *testing.T) {
	t.Run("compare-all", func(t *testing.T) {
		trackWrites = trackOff
		t.Cleanup(func() { trackWrites = trackAuto })
		checkpointsHoldTheMemory(t, false)
	})
	t.Run("tracked", func(t *testing.T) {
		tracker(t)
		always(t)
		checkpointsHoldTheMemory(t, true)
	})
}

func checkpointsHoldTheMemory(t *testing.T, tracking bool) {
	ctx := context.Background()
	g := builtGuest(t)
	s, err := g.NewSession(ctx, nil)
	require.NoError(t, err)
	defer s.Close()
	codes := []string{
		"x = 1",
		"x += 1",
		"data = {i: str(i) * 10 for i in range(20000)}",
		"del data",
		"big = bytearray(40 << 20)\nbig[::4096] = b'\\1' * len(big[::4096])", // past the memory's capacity
		"big[5 << 20] = 7",
		"del big",
		"open('/tmp/f', 'wb').write(bytes(range(256)) * 4096)",
		"blob = open('/tmp/f', 'rb').read()", // the host writes into the guest's memory
		"import sys\nline = sys.stdin.readline()",
		"s = sum(i * i for i in range(10000))",
		"x += 1",
	}
	tracked := 0
	for i, code := range codes {
		opts := &RunOptions{}
		if i == 9 {
			opts.Stdin = bytes.NewReader(bytes.Repeat([]byte("z"), 100_000))
		}
		_, err := s.Run(ctx, code, opts)
		require.NoError(t, err, code)
		s.mu.Lock()
		require.True(t, s.settled())
		m := s.inst.mem.mem
		if m.tracking {
			tracked++
		}
		require.NoError(t, checkpointHolds(s.ckpt, s.base, m.buf, s.g.deadStack()), "after %q", code)
		s.mu.Unlock()
	}
	if tracking {
		assert.Greater(t, tracked, len(codes)/2, "most checkpoints were taken with tracking")
	} else {
		assert.Zero(t, tracked)
	}

	// A run stopped mid-way rolls back to the last checkpoint.
	_, err = s.Run(ctx, "x = 'lost'\nwhile True: pass", &RunOptions{Limits: Limits{Fuel: 50_000_000}})
	require.ErrorIs(t, err, ErrFuelExhausted)
	res, err := s.Run(ctx, "x, len(blob), line[:3]", nil)
	require.NoError(t, err)
	assert.Equal(t, "(3, 1048576, 'zzz')", res.Value)
}

// TestTrackedMemoryUntrackedOnRelease: a memory given back (to the pool
// or the collector) is no longer tracked, so the process's later writes
// to it cost nothing.
func TestTrackedMemoryUntrackedOnRelease(t *testing.T) {
	tracker(t)
	always(t)
	m := &linearMemory{buf: make([]byte, 1<<20), limit: 1 << 30}
	m.track()
	require.True(t, m.tracking)
	m.buf[3*pageSize]++
	pages, ok := m.written()
	require.True(t, ok)
	assert.Equal(t, []uint32{3}, pages)
	// Growing past the capacity moves the memory: untracked.
	m.Reallocate(4 << 20)
	assert.False(t, m.tracking)
	_, ok = m.written()
	assert.False(t, ok)
	m.track()
	require.True(t, m.tracking)
	m.release()
	assert.False(t, m.tracking)
}

// TestTrackedFirstCheckpointSkipsUnpopulated: the first checkpoint of a
// tracked session still finds the pages no one wrote, and neither reads
// nor trims them. Tracking write-protects every unpopulated page, after
// which the kernel reports it as swapped out: asked in that order, the
// checkpoint found none, read all of memory and made it resident, and
// the first checkpoint of every resume and wake cost milliseconds more.
func TestTrackedFirstCheckpointSkipsUnpopulated(t *testing.T) {
	tracker(t)
	always(t)
	g := builtGuest(t) // a guest of its own: its memories are fresh mappings
	s, err := g.NewSession(context.Background(), nil)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Run(context.Background(), "x = 1", nil)
	require.NoError(t, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.True(t, s.settled())
	m := s.inst.mem.mem
	require.True(t, m.tracking)
	dead := g.deadStack()
	zero := 0
	for _, z := range m.zero[min(dead, len(m.zero)):] {
		if z {
			zero++
		}
	}
	assert.Greater(t, zero, (len(m.buf)/pageSize-dead)/4, "a fresh session's memory past the stack is mostly unwritten")
	require.NoError(t, checkpointHolds(s.ckpt, s.base, m.buf, dead))
}
