package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/sys"
)

// capture keeps at most max bytes of what is written to it and copies
// everything written to tee. Past max it either keeps the output's start
// and its end (the guest is told every write succeeded, so a chatty
// program is not disturbed): Result gets the start, a line saying how
// many bytes were dropped, and the last quarter of max; or, with stop
// set, it stops the run with ErrOutputLimit.
type capture struct {
	buf       bytes.Buffer // everything, while it fits; then the start
	tail      []byte       // once past max: the latest bytes, at most tailMax() (more while compacting)
	max       int
	total     int64 // bytes the guest wrote, kept or not
	truncated bool
	tee       io.Writer
	teeErr    error
	stop      func(error) // nil: keep the start and the end
}

// minTail is the smallest max that keeps an end: below it only the start
// is kept.
const minTail = 1024

// droppedLine is what Result holds between the start and the end kept.
func droppedLine(n int64) string { return fmt.Sprintf("\n[... %d bytes dropped ...]\n", n) }

// tailMax is how many of the latest bytes are kept past max.
func (c *capture) tailMax() int {
	if c.stop != nil || c.max < minTail {
		return 0
	}
	return c.max / 4
}

// headMax is how many bytes of the start are kept past max: what leaves
// room for the end and the dropped line (whose count has at most 19 digits).
func (c *capture) headMax() int {
	if t := c.tailMax(); t > 0 {
		return c.max - t - len(droppedLine(1e18))
	}
	return c.max
}

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	if c.stop != nil && c.buf.Len()+len(p) > c.max {
		p = p[:c.max-c.buf.Len()]
		c.truncated = true
	}
	if c.tee != nil && c.teeErr == nil && len(p) > 0 {
		_, c.teeErr = c.tee.Write(p)
	}
	if c.truncated && c.stop != nil {
		c.buf.Write(p)
		c.stop(ErrOutputLimit)
		return len(p), ErrOutputLimit
	}
	if !c.truncated && c.buf.Len()+len(p) <= c.max {
		c.buf.Write(p)
		return n, nil
	}
	if !c.truncated {
		// Past max for the first time: what is kept becomes the start,
		// the rest of it the beginning of the end.
		c.truncated = true
		if h := c.headMax(); c.buf.Len() > h {
			c.tail = append(c.tail, c.buf.Bytes()[h:]...)
			c.buf.Truncate(h)
		} else {
			k := min(h-c.buf.Len(), len(p))
			c.buf.Write(p[:k])
			p = p[k:]
		}
		c.tail = append(c.tail, p...)
	} else {
		c.tail = append(c.tail, p...)
	}
	if t := c.tailMax(); len(c.tail) > 2*t {
		// Compact: keep the latest t bytes (the buffer never holds more
		// than 2t plus one write's bytes, and after a large write gives
		// its memory back).
		latest := c.tail[len(c.tail)-t:]
		if cap(c.tail) > 4*t {
			c.tail = append(make([]byte, 0, 2*t+1), latest...)
		} else {
			c.tail = append(c.tail[:0], latest...)
		}
	}
	return n, nil
}

// bytes returns what the Result keeps: everything written, or its start,
// a line saying how many bytes were dropped, and its end (from a line's
// start where one begins in the end's first half).
func (c *capture) bytes() []byte {
	t := c.tailMax()
	if !c.truncated || t == 0 {
		return c.buf.Bytes()
	}
	tail := c.tail[max(0, len(c.tail)-t):]
	if i := bytes.IndexByte(tail[:len(tail)/2], '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	dropped := c.total - int64(c.buf.Len()) - int64(len(tail))
	out := make([]byte, 0, c.buf.Len()+len(tail)+64)
	out = append(out, c.buf.Bytes()...)
	out = append(out, droppedLine(dropped)...)
	return append(out, tail...)
}

// lineTee passes whole lines on to w, so that a caller streaming a run's
// output gets it by line, as the guest ends each one, not in the pieces
// print writes (print("a", 1) is four writes): a write's bytes up to its
// last newline or carriage return (a progress line) go on at once, the
// rest waits for the line's end, for lineTeeMax bytes, or for Flush, which
// the run calls before the guest sleeps or waits for stdin (so a prompt or
// a line of progress dots shows) and when it ends.
type lineTee struct {
	w       io.Writer
	pending []byte
}

// lineTeeMax is the most of an unended line held back.
const lineTeeMax = 4096

func (l *lineTee) Write(p []byte) (int, error) {
	i := bytes.LastIndexAny(p, "\n\r")
	if i < 0 && len(l.pending)+len(p) < lineTeeMax {
		l.pending = append(l.pending, p...)
		return len(p), nil
	}
	end := len(p)
	if i >= 0 {
		end = i + 1
	}
	var err error
	if len(l.pending) > 0 {
		l.pending = append(l.pending, p[:end]...)
		_, err = l.w.Write(l.pending)
		l.pending = l.pending[:0]
	} else {
		_, err = l.w.Write(p[:end])
	}
	l.pending = append(l.pending, p[end:]...)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush passes on what waits for its line's end.
func (l *lineTee) Flush() error {
	if len(l.pending) == 0 {
		return nil
	}
	_, err := l.w.Write(l.pending)
	l.pending = l.pending[:0]
	return err
}

// flush passes on the unended line the capture's tee holds.
func (c *capture) flush() {
	if t, ok := c.tee.(*lineTee); ok && c.teeErr == nil {
		c.teeErr = t.Flush()
	}
}

// stdinReader lets a run's deadline interrupt a guest blocked reading
// stdin. In-memory readers cannot block and are read directly; any other
// reader is read on a helper goroutine, which, if the run ends while a Read
// is blocked, finishes when that Read returns.
type stdinReader struct {
	ctx     context.Context
	r       io.Reader
	pending chan readResult // the helper's answer to an unfinished Read
	run     *runState       // stopped when ctx ends a read
}

type readResult struct {
	b   []byte
	err error
}

// newStdin returns the guest's view of r: a read that blocks past ctx's
// end stops run (at once, not when its watchdog comes round: the guest may
// finish before, as if it had read end of file).
func newStdin(ctx context.Context, r io.Reader, run *runState) io.Reader {
	switch r.(type) {
	case nil:
		return bytes.NewReader(nil)
	case *bytes.Reader, *strings.Reader, *bytes.Buffer:
		return r
	}
	return &stdinReader{ctx: ctx, r: r, run: run}
}

func (s *stdinReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		s.run.stop(err)
		return 0, err
	}
	if s.pending == nil {
		if s.run.flushOutput != nil {
			s.run.flushOutput() // a prompt shows before the guest waits
		}
		ch := make(chan readResult, 1)
		s.pending = ch
		buf := make([]byte, len(p))
		go func() {
			n, err := s.r.Read(buf)
			ch <- readResult{buf[:n], err}
		}()
	}
	select {
	case res := <-s.pending:
		s.pending = nil
		n := copy(p, res.b)
		if n < len(res.b) {
			// p shrank since the Read was started; keep the rest.
			rest := res.b[n:]
			s.r = io.MultiReader(bytes.NewReader(rest), s.r)
		}
		return n, res.err
	case <-s.ctx.Done():
		s.run.stop(s.ctx.Err())
		return 0, s.ctx.Err()
	}
}

// sleeper returns a nanosleep that really sleeps, but wakes as soon as ctx
// is done, stopping run r, and adds the time slept to *slept.
func sleeper(ctx context.Context, slept *time.Duration, r *runState) sys.Nanosleep {
	return func(ns int64) {
		if ns <= 0 {
			return
		}
		if r.flushOutput != nil {
			r.flushOutput()
		}
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		start := time.Now()
		select {
		case <-t.C:
		case <-ctx.Done():
			// Stopped now, not when the watchdog comes round: the guest
			// may finish before it does, as if it had slept.
			r.stop(ctx.Err())
		}
		*slept += time.Since(start)
	}
}

// deterministicEpoch is the wall clock's start in deterministic mode.
var deterministicEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// deterministicClock is a clock that advances with the fuel the run has
// used (one nanosecond per unit) and the time it asked to sleep, so that
// it reads the same at the same point of every run. offset is the time that
// passed before the run (a session's earlier runs); onSleep, if set, is told
// of every sleep.
type deterministicClock struct {
	r       *runState
	offset  int64
	slept   time.Duration
	onSleep func(time.Duration)
}

func (c *deterministicClock) elapsed() int64 { return c.offset + c.r.fuelUsed() + int64(c.slept) }

func (c *deterministicClock) walltime() (int64, int32) {
	t := deterministicEpoch.Add(time.Duration(c.elapsed()))
	return t.Unix(), int32(t.Nanosecond())
}

func (c *deterministicClock) nanotime() int64 { return c.elapsed() }

// sleep sleeps for real, bounded by the run's context, but advances the
// clock by exactly the time asked for.
func (c *deterministicClock) sleep(ctx context.Context) sys.Nanosleep {
	var real time.Duration
	s := sleeper(ctx, &real, c.r)
	return func(ns int64) {
		s(ns)
		if ns > 0 {
			c.slept += time.Duration(ns)
			if c.onSleep != nil {
				c.onSleep(time.Duration(ns))
			}
		}
	}
}

// setClocks gives run r its clocks and sleep: deterministic ones (see
// deterministicClock), or the host's real clock, with a monotonic clock
// that starts at the run's start.
func (r *runState) setClocks(ctx context.Context, deterministic bool, offset int64, onSleep func(time.Duration)) {
	if deterministic {
		c := &deterministicClock{r: r, offset: offset, onSleep: onSleep}
		r.walltime, r.nanotime, r.sleep = c.walltime, c.nanotime, c.sleep(ctx)
		return
	}
	var slept time.Duration
	start := time.Now()
	r.walltime = func() (int64, int32) {
		now := time.Now()
		return now.Unix(), int32(now.Nanosecond())
	}
	r.nanotime = func() int64 { return int64(time.Since(start)) }
	r.sleep = sleeper(ctx, &slept, r)
}

// seededRand is a deterministic random source for deterministic mode.
func seededRand(seed uint64) io.Reader {
	var key [32]byte
	copy(key[8:], "fumehood deterministic mode")
	binary.LittleEndian.PutUint64(key[:8], seed)
	return rand.NewChaCha8(key)
}

var errNoFuel = errors.New("sandbox: deterministic mode needs a guest with fuel")
