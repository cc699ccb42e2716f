package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/fumehood/fumehood/internal/fuel"
)

// Errors for the limits that stop a run. A run stopped by its deadline or
// a cancel returns the context's error (context.DeadlineExceeded or
// context.Canceled) instead.
var (
	// ErrFuelExhausted reports a run that used up its fuel budget.
	ErrFuelExhausted = errors.New("sandbox: fuel exhausted")
	// ErrMemoryLimit reports a run that failed after its linear memory
	// reached the memory limit.
	ErrMemoryLimit = errors.New("sandbox: memory limit reached")
	// ErrOutputLimit reports a run stopped because it wrote more than
	// MaxOutput bytes to stdout or stderr with StopAtOutputLimit set.
	ErrOutputLimit = errors.New("sandbox: output limit reached")
)

const (
	// DefaultFuelPerSecond is the fuel a run that sets none gets for each
	// second of its timeout: 3x10^12 under the default 30 s. Fuel counts
	// WebAssembly instructions (block markers, nop and drop are free); the
	// built guest executes 2 to 30 billion of them a second on this
	// project's 2-core machines, depending on the code (`while True: pass`
	// is the fastest seen, about 29 billion), so the default outlasts the
	// deadline by 3x or more: a caller who sets only a deadline gets a
	// deadline error, and fuel is the bound of those who set it (the
	// deterministic, machine-independent one).
	DefaultFuelPerSecond = 100_000_000_000
	// DefaultFuel is the fuel budget of a run that sets none and has no
	// timeout (Limits.Timeout negative): seconds to a minute of pure
	// computation, the bound of last resort.
	DefaultFuel = 100_000_000_000
	// UnlimitedFuel as Limits.Fuel lifts the fuel bound.
	UnlimitedFuel = math.MaxInt64
)

// fuelChunk is the most fuel the guest's global holds at a time: the
// guest calls out_of_fuel at least once a chunk (a few milliseconds), which
// gives the Go runtime a safe point. Without one, a garbage collection's
// stop-the-world phase waits for a guest in a long loop, stalling the whole
// process, and a deadline would be checked only when the budget ran out.
const fuelChunk = 1 << 24

// poison is written into the fuel global to stop a guest: the next check
// at a function entry or loop header calls out_of_fuel. Subtracting any
// realistic cost from it cannot overflow.
const poison = -(int64(1) << 62)

// runKey finds a run's state in the context passed to the guest.
type runKey struct{}

// runState is what the host side of one run shares between the guest's
// goroutine (host calls: out_of_fuel, clocks, output) and the watchdog.
type runState struct {
	ctx    context.Context
	refill func(used int64) int64

	mu      sync.Mutex
	fuel    api.MutableGlobal // nil for guests built without fuel
	armed   bool              // fuel holds the run's budget (arm, armAtCheck)
	budget  int64             // the fuel the run may use, refills included
	granted int64             // fuel put into the global in total
	stopped error             // why the host stopped the run, if it did
	final   int64             // the global's value when the run was stopped

	// The run's clocks and sleep, for poll_oneoff.
	walltime func() (int64, int32)
	nanotime func() int64
	sleep    func(ns int64)

	// flushOutput, if set, passes on the output the caller's streams are
	// still to get (an unended line), before the guest waits.
	flushOutput func()

	// alarm is the guest's SIGALRM timer, on the guest's goroutine only.
	alarm alarm

	// invoker runs the C++ invokes of the instance the run is in, if
	// its guest has any (emeh.go).
	invoker *invoker
}

// stop records why the run must end and poisons the fuel so that the guest
// reaches out_of_fuel at its next check. The first reason wins.
func (r *runState) stop(reason error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked(reason)
}

func (r *runState) stopLocked(reason error) {
	if r.stopped == nil {
		r.stopped = reason
		if r.fuel != nil {
			r.final = int64(r.fuel.Get())
		}
	}
	if r.fuel != nil {
		r.fuel.Set(api.EncodeI64(poison))
	}
}

// fuelUsed returns the fuel spent so far.
func (r *runState) fuelUsed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fuelUsedLocked()
}

func (r *runState) fuelUsedLocked() int64 {
	if r.fuel == nil {
		return 0
	}
	remaining := r.final
	if r.stopped == nil {
		remaining = int64(r.fuel.Get())
	}
	used := r.granted - remaining
	return min(max(used, 0), r.granted)
}

// expect gives the run its budget before the guest is instantiated, so
// that a start function meeting a fuel check during instantiation, before
// supervise arms the global, is charged to it (armAtCheck).
func (r *runState) expect(budget int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.budget = budget
}

// arm puts the first chunk of the budget into the guest's fuel global,
// unless the instance's start function armed it already.
func (r *runState) arm(g api.MutableGlobal, budget int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armed {
		return
	}
	r.fuel, r.budget, r.armed = g, budget, true
	r.fuel.Set(0)
	r.topUpLocked()
}

// armAtCheckLocked arms the fuel global of mod, whose start function met
// a fuel check while it was being instantiated, with the budget expect
// gave. The global has counted down from its initial 0, so what the start
// function spent is charged. Without an expected budget (an instance
// instantiated outside a run), it ends the instantiation with an internal
// error.
func (r *runState) armAtCheckLocked(mod api.Module) {
	g, _ := mod.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal)
	if g == nil || r.budget <= 0 {
		panic(fmt.Errorf("%w: out_of_fuel called before the run's fuel was armed", errInternal))
	}
	r.fuel, r.armed = g, true
}

// topUpLocked moves up to a chunk of the unspent budget into the global
// and reports whether the guest may go on.
func (r *runState) topUpLocked() bool {
	remaining := int64(r.fuel.Get())
	used := r.granted - remaining
	give := min(int64(fuelChunk), r.budget-r.granted)
	if give > 0 {
		r.granted += give
		remaining += give
		r.fuel.Set(uint64(remaining))
	}
	return remaining >= 0 && used < r.budget
}

// outOfFuel is the guest's fumehood.out_of_fuel import: it runs on the
// guest's goroutine when the fuel global went negative, at least once a
// chunk, the first time perhaps in a start function, while the module
// is instantiated. Once the fuel is topped up, it rings the guest's alarm
// if it is due (alarm.go).
func outOfFuel(ctx context.Context, mod api.Module) {
	r, _ := ctx.Value(runKey{}).(*runState)
	if r == nil {
		panic(fmt.Errorf("%w: out_of_fuel called outside a run", errInternal))
	}
	r.refuel(mod)
	r.ring(ctx, mod)
}

// refuel tops up mod's fuel global from the budget, asking for more when
// it is spent, or panics with the reason the run stops.
func (r *runState) refuel(mod api.Module) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.armed {
		r.armAtCheckLocked(mod)
	}
	for {
		if r.stopped == nil && r.ctx.Err() != nil {
			r.stopLocked(r.ctx.Err())
		}
		if r.stopped != nil {
			panic(r.stopped)
		}
		if r.topUpLocked() {
			return
		}
		if r.granted < r.budget {
			continue // the overdraft took more than a chunk
		}
		// The budget is spent: ask for more.
		var more int64
		if r.refill != nil {
			used := r.granted - int64(r.fuel.Get())
			r.mu.Unlock()
			more = r.refill(used)
			r.mu.Lock()
		}
		if more <= 0 || r.stopped != nil {
			r.stopLocked(ErrFuelExhausted)
			panic(r.stopped)
		}
		r.budget = min(r.budget+more, math.MaxInt64-fuelChunk)
	}
}

// supervise arms the fuel global with the first chunk of budget, points
// sink at the instance's errno global and sets the watchdog. The function
// it returns undoes all three and returns once the watchdog has ended, so
// no goroutine outlives the run. Either global may be nil. The watchdog is
// a context.AfterFunc, not a goroutine of its own: a run that ends before
// its context is done (nearly all) starts none and wakes no idle thread,
// which a session's short runs would pay for.
func (r *runState) supervise(ctx context.Context, fuelGlobal, errnoGlobal api.MutableGlobal, budget int64, sink *errnoSink) (end func()) {
	if fuelGlobal != nil {
		r.arm(fuelGlobal, budget)
	}
	if sink != nil && errnoGlobal != nil {
		sink.global = errnoGlobal
	}
	done := make(chan struct{})
	watched := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(watched)
		r.watch(ctx, done)
	})
	return func() {
		if !stop() {
			// The watchdog started: stop it and wait for it to end.
			close(done)
			<-watched
		}
		if sink != nil && errnoGlobal != nil {
			sink.global = nil
		}
	}
}

// instantiateFuelHost adds the fumehood host module to rt.
func instantiateFuelHost(ctx context.Context, rt wazero.Runtime) error {
	_, err := rt.NewHostModuleBuilder(fuel.ImportModule).
		NewFunctionBuilder().WithFunc(outOfFuel).Export(fuel.ImportName).
		Instantiate(ctx)
	return err
}

// watch stops the run, its context being done, until done is closed. The
// guest may be between reading and writing the fuel global, overwriting
// one poison with its own value, so the poison is written again every
// millisecond.
func (r *runState) watch(ctx context.Context, done <-chan struct{}) {
	r.stop(ctx.Err())
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			r.stop(ctx.Err())
		}
	}
}

// linearMemory backs a guest's linear memory and refuses to grow it past
// a limit, so one run's memory bound does not depend on the runtime's.
//
// Where it can (Linux), the memory is a mapping of its limit's size made
// up front (reserveMemory), which the kernel backs page by page as the
// guest writes: it grows in place. Grown by copying into buffers twice as
// large, a run filling 256 MiB held 761 MB of the host's memory at its
// peak (each old buffer waiting for the collector); in place it holds
// what the guest wrote (TestMemoryGrowsInPlace, docs/SECURITY.md).
type linearMemory struct {
	buf   []byte
	limit uint64
	// region, if not nil, is the mapping buf is the start of
	// (reserveMemory), unmapped when the memory is released, not
	// collected.
	region []byte
	// peak is the largest size the memory had; refused counts growth
	// attempts refused for the limit. Both are read after the run.
	peak    uint64
	refused int
	// pool, if not nil, takes the memory back for another instance once
	// its owner releases it (release): wazero's Free does not, since a
	// run can still be executing when the runtime closes its module
	// (Guest.Close).
	pool *memPool
	// watch, when tracking, is buf as the kernel tracks the pages
	// written to it (written.go); pages is written's buffer.
	watch    watched
	tracking bool
	pages    []uint32
	// zero is unpopulated's buffer, for the checkpoints; populated is
	// set once it found every page past the dead stack populated (a
	// pooled memory, or one the guest wrote all of), which they stay
	// until the memory grows: the checkpoints stop asking.
	zero      []bool
	populated bool
	// trimmed is set once the first checkpoint gave back the memory's
	// runs of zero pages (trimZeros), gaveBack if there were any: then
	// the pool asks which pages to zero.
	trimmed, gaveBack bool
}

// track starts tracking the pages written to the memory, if the kernel
// can and it pays (writes): from now on written reports them. It is a
// no-op when tracking already.
func (m *linearMemory) track() {
	if m.tracking || len(m.buf) == 0 {
		return
	}
	t := writes()
	if t == nil {
		return
	}
	w, err := t.watch(m.buf)
	if err != nil {
		return
	}
	m.watch, m.tracking = w, true
}

// untrack stops tracking the memory's writes.
func (m *linearMemory) untrack() {
	if m.tracking {
		kernelTracker.unwatch(m.watch)
		m.watch, m.tracking = watched{}, false
	}
}

// written returns the indexes of the pages written since the last call or
// track, and whether they are known: not when the memory is not tracked
// (or not since its buffer last moved), nor when the kernel fails, which
// also ends the tracking.
func (m *linearMemory) written() ([]uint32, bool) {
	if !m.tracking {
		return nil, false
	}
	pages, err := kernelTracker.written(m.watch, m.pages[:0])
	if err != nil {
		m.untrack()
		return nil, false
	}
	m.pages = pages
	return pages, true
}

// unpopulated returns which pages the kernel holds none of (they read as
// zeros; see resident_linux.go), or nil when none or it cannot tell. Once
// it finds none past the dead pages it stops asking, until the memory
// grows or gives pages back.
func (m *linearMemory) unpopulated(dead int) []bool {
	if m.populated {
		return nil
	}
	m.zero = unpopulated(m.buf, m.zero)
	m.populated = m.zero != nil && !slices.Contains(m.zero[min(dead, len(m.zero)):], true)
	return m.zero
}

// trimOnce, the first time it is called (after the first checkpoint's
// comparison, zero being what unpopulated said then), gives back the
// memory's runs of zero pages, the dead stack's included: a memory
// written all over with zeros (pooled, or reused by Go) then holds what
// its session uses.
func (m *linearMemory) trimOnce(zero []bool) {
	if m.trimmed {
		return
	}
	m.trimmed = true
	if trimZeros(m.buf, zero) > 0 {
		m.gaveBack, m.populated = true, false
	}
}

func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > m.limit && len(m.buf) > 0 {
		m.refused++
		return nil
	}
	if size > uint64(len(m.buf)) {
		m.populated = false // the pages added may be unpopulated
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
	} else {
		// Grow geometrically within the limit, so a guest growing page by
		// page does not copy its memory every time. A mapped memory's
		// capacity (which the write tracker registers, written.go) grows
		// alike, in place: only a memory of Go's is copied.
		c := max(size, min(2*uint64(cap(m.buf)), m.limit))
		if c <= uint64(len(m.region)) {
			m.buf = m.region[:size:c]
		} else {
			nb := make([]byte, size, c)
			copy(nb, m.buf)
			m.free()
			m.buf = nb
		}
		m.untrack() // the pages added are not tracked
	}
	m.peak = max(m.peak, size)
	return m.buf
}

func (m *linearMemory) Free() {}

// release gives the memory back to its pool, if it has one, else to the
// system if it is mapped: only when no call into its instance can be
// running (after the call returned, or the instance is closed).
func (m *linearMemory) release() {
	if m == nil {
		return
	}
	m.untrack()
	if m.pool != nil && m.buf != nil {
		m.pool.put(pooled{b: m.buf, region: m.region}, m.gaveBack)
	} else {
		m.free()
	}
	m.buf, m.pool = nil, nil
}

// free unmaps a mapped memory; Go's is left to the collector.
func (m *linearMemory) free() {
	if m.region != nil {
		m.untrack()
		unreserveMemory(m.region)
		m.region = nil
	}
}

// maxReserve bounds a mapping reserveMemory makes: a 32-bit memory's size.
const maxReserve = 4 << 30

// memoryAllocator gives each instance of a run a linearMemory.
type memoryAllocator struct {
	limit uint64
	// reserve is the capacity to allocate up front, for a memory about to
	// be grown to a known size (a session restored from a checkpoint).
	reserve uint64
	// pool, if not nil, supplies the memory and takes it back when the
	// instance's owner releases it (instance.close).
	pool *memPool
	mem  *linearMemory
}

func (a *memoryAllocator) Allocate(capacity, maximum uint64) experimental.LinearMemory {
	m := &linearMemory{limit: min(a.limit, maximum), pool: a.pool}
	want := min(max(capacity, a.reserve), m.limit)
	// A mapping of the limit's size (rounded up to whole wasm pages), in
	// which the memory grows in place; pooled ones are mapped too.
	size := (m.limit + wasmPage - 1) &^ (wasmPage - 1)
	if a.pool != nil {
		p := a.pool.get(want, size)
		m.buf, m.region = p.b, p.region
	}
	if m.buf == nil {
		if m.region = reserveMemory(size); m.region != nil {
			m.buf = m.region[:0:want]
		} else {
			m.buf = make([]byte, 0, want)
		}
	}
	a.mem = m
	return m
}

// release releases the memory the allocator gave, if any, when no call
// into its instance can be running: see linearMemory.release.
func (a *memoryAllocator) release() {
	if a.mem != nil {
		a.mem.release()
	}
}

// memPool keeps the linear memories of a guest's closed instances, zeroed,
// for its next ones. A new memory of 28 MiB costs Go a zeroing of all of
// it, often of pages the runtime returned to the system meanwhile, and
// touching a page the system must back again is dear (13 µs a page in a
// virtual machine measured, 67 ms for 20 MiB); a pooled one was touched
// already, and only the part the last instance used is zeroed, on a
// goroutine of its own, after the instance's owner let go of it. It keeps
// at most maxPooled memories of at most maxPooledBytes each (the part
// their instances used), those being zeroed included.
type memPool struct {
	mu      sync.Mutex
	free    []pooled
	zeroing int        // memories being zeroed, which will be free
	zeroed  *sync.Cond // signalled when one is (on mu)
	closed  bool
	wg      *sync.WaitGroup // the guest's background work, which Close waits for
}

const (
	maxPooled      = 4
	maxPooledBytes = 64 << 20
)

// pooled is a memory in the pool: b, of length 0, and the mapping it
// starts, if it is mapped (see linearMemory).
type pooled struct {
	b, region []byte
}

// fits reports whether the memory can back one of capacity n and, if it
// is mapped, of a mapping of at least size.
func (m pooled) fits(n, size uint64) bool {
	if m.region != nil {
		return uint64(len(m.region)) >= size
	}
	return uint64(cap(m.b)) >= n
}

// get returns a zeroed memory of length 0 and a capacity of at least n
// (for a mapped one, a mapping of at least size), or none (a nil b).
// With none free but some being zeroed, it waits for those: a zeroing
// takes a millisecond or two, a new memory's first touch much longer.
func (p *memPool) get(n, size uint64) pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for i, m := range p.free {
			if m.fits(n, size) {
				p.free = append(p.free[:i], p.free[i+1:]...)
				if m.region != nil {
					m.b = m.region[:0:max(uint64(cap(m.b)), n)]
				}
				return m
			}
		}
		if p.zeroing == 0 || p.closed {
			return pooled{}
		}
		if p.zeroed == nil {
			p.zeroed = sync.NewCond(&p.mu)
		}
		p.zeroed.Wait()
	}
}

// put zeroes m.b (the part an instance used: it never shrinks) and keeps
// it, if there is room, else unmaps it if it is mapped. sparse says that
// pages of b were given back to the kernel (trimZeros): those are zeros,
// and are not written.
func (p *memPool) put(m pooled, sparse bool) {
	b := m.b
	used := cap(b)
	if m.region != nil {
		used = len(b) // the pages past it were never written
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if used > maxPooledBytes || p.closed || len(p.free)+p.zeroing >= maxPooled {
		m.drop()
		return
	}
	p.zeroing++
	if p.wg != nil {
		p.wg.Add(1)
	}
	go func() {
		if p.wg != nil {
			defer p.wg.Done()
		}
		// A MiB at a time, so that Guest.Close, which waits for this,
		// does not wait for the rest (the command line closes its guest
		// right after its one run). Every page is written, even one the
		// kernel holds none of, unless sparse: asking the kernel which
		// (unpopulated) for every memory cost tiny one-shot runs a fifth
		// of their throughput (tiny one-shot runs/s: 531-640 a
		// second against 730-844 in the same rounds), and only a
		// session's memory has pages given back.
		var zero []bool
		if sparse {
			zero = unpopulated(b, nil)
		}
		for at := 0; at < len(b) && !p.isClosed(); at += 1 << 20 {
			end := min(at+1<<20, len(b))
			if zero == nil {
				clear(b[at:end])
				continue
			}
			for pg := at; pg < end; pg += pageSize {
				if i := pg / pageSize; i >= len(zero) || !zero[i] {
					clear(b[pg:min(pg+pageSize, end)])
				}
			}
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.zeroing--
		if m.b = b[:0]; p.closed {
			m.drop()
		} else {
			p.free = append(p.free, m)
		}
		if p.zeroed != nil {
			p.zeroed.Broadcast()
		}
	}()
}

// drop unmaps the memory if it is mapped.
func (m pooled) drop() {
	if m.region != nil {
		unreserveMemory(m.region)
	}
}

func (p *memPool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// close drops the pooled memories and keeps no more.
func (p *memPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.free {
		m.drop()
	}
	p.free, p.closed = nil, true
	if p.zeroed != nil {
		p.zeroed.Broadcast()
	}
}

// defaultFuel is the fuel of a run with this timeout (negative: none)
// that sets none: DefaultFuelPerSecond of the timeout, at least
// DefaultFuelPerSecond, saturating at UnlimitedFuel.
func defaultFuel(timeout time.Duration) int64 {
	if timeout < 0 {
		return DefaultFuel
	}
	secs := max(1, math.Ceil(timeout.Seconds()))
	if secs >= float64(UnlimitedFuel)/DefaultFuelPerSecond {
		return UnlimitedFuel
	}
	return int64(secs) * DefaultFuelPerSecond
}
