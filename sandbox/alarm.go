package sandbox

import (
	"context"
	"math"

	"github.com/tetratelabs/wazero/api"
)

// sigalrm is SIGALRM's number in WASI's C library, as in Linux's.
const sigalrm = 14

// alarm is a run's view of the guest's SIGALRM timer: signal.alarm and
// signal.setitimer(ITIMER_REAL) in the built guest write two i64 into its
// memory (the driver's fumehood_timer export gives their address): when
// SIGALRM is due on the run's monotonic clock in ns (0: never), and the
// interval that re-arms it. The host reads them at each fuel check (at
// least once a fuel chunk, a few milliseconds) and before a sleep, and
// when the alarm is due calls the driver's fumehood_signal, which trips
// the signal as a kernel would: the Python handler runs at the
// interpreter's next check. In deterministic mode the clock is the
// deterministic one, so the alarm rings at the same point of every run.
// The driver clears the timer at each request: an alarm ends with its run.
type alarm struct {
	looked bool
	addr   uint32 // 0: the guest has no timer
	signal api.Function
	busy   bool // in fumehood_signal
}

// due returns when the guest's alarm is due, and whether it is set.
func (a *alarm) due(ctx context.Context, mod api.Module) (int64, bool) {
	if a.busy || mod == nil {
		return 0, false
	}
	if !a.looked {
		a.looked = true
		timer, signal := mod.ExportedFunction("fumehood_timer"), mod.ExportedFunction("fumehood_signal")
		if timer == nil || signal == nil {
			return 0, false
		}
		res, err := timer.Call(ctx)
		if err != nil {
			panic(err)
		}
		if len(res) == 1 {
			a.addr, a.signal = uint32(res[0]), signal
		}
	}
	if a.addr == 0 {
		return 0, false
	}
	when, ok := mod.Memory().ReadUint64Le(a.addr)
	return int64(when), ok && int64(when) > 0
}

// ring delivers SIGALRM to the guest if its alarm is due, re-arming an
// interval timer, and reports whether it did. It runs on the guest's
// goroutine, from a host function, with no lock held: fumehood_signal is
// guest code, which checks fuel.
func (r *runState) ring(ctx context.Context, mod api.Module) bool {
	a := &r.alarm
	when, ok := a.due(ctx, mod)
	if !ok || r.nanotime == nil {
		return false
	}
	now := r.nanotime()
	if when > now {
		return false
	}
	mem := mod.Memory()
	interval, _ := mem.ReadUint64Le(a.addr + 8)
	next := int64(0)
	if iv := int64(interval); iv > 0 {
		next = now + iv
		if when <= math.MaxInt64-iv && when+iv > now {
			next = when + iv // on the interval's beat, as setitimer
		} else if now > math.MaxInt64-iv {
			next = 0
		}
	}
	mem.WriteUint64Le(a.addr, uint64(next))
	a.busy = true
	defer func() { a.busy = false }()
	if _, err := a.signal.Call(ctx, sigalrm); err != nil {
		panic(err) // the run's stop, or the program's end (SIGALRM's default action)
	}
	return true
}
