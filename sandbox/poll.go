package sandbox

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// instantiateWASI adds wazero's WASI preview 1 host module to rt, with
// poll_oneoff replaced by pollOneoff. wazero's own refuses absolute clock
// subscriptions with ENOTSUP, and CPython's time.sleep uses exactly those
// (clock_nanosleep with TIMER_ABSTIME).
func instantiateWASI(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(pollOneoff),
			[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32},
			[]api.ValueType{api.ValueTypeI32}).
		WithParameterNames("in", "out", "nsubscriptions", "result.nevents").
		Export("poll_oneoff")
	_, err := b.Instantiate(ctx)
	return err
}

// WASI preview 1 encodings used by poll_oneoff.
const (
	errnoSuccess = 0
	errnoFault   = 21
	errnoInval   = 28
	errnoNotsup  = 58

	eventClock   = 0
	eventFdRead  = 1
	eventFdWrite = 2

	clockRealtime  = 0
	clockMonotonic = 1

	subscriptionSize = 48
	eventSize        = 32
)

// pollOneoff implements WASI's poll_oneoff. Clock subscriptions, relative
// or absolute, sleep through the run's sleeper, which its deadline
// interrupts. File descriptor subscriptions are reported ready at once: a
// read that then blocks is interrupted by the deadline as well.
func pollOneoff(ctx context.Context, mod api.Module, stack []uint64) {
	in, out, n, resultPtr := uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])
	stack[0] = uint64(poll(ctx, mod, in, out, n, resultPtr))
}

func poll(ctx context.Context, mod api.Module, in, out, n, resultPtr uint32) uint32 {
	if n == 0 {
		return errnoInval
	}
	mem := mod.Memory()
	subs, ok := mem.Read(in, n*subscriptionSize)
	if !ok || uint64(n)*subscriptionSize > 1<<31 {
		return errnoFault
	}
	events, ok := mem.Read(out, n*eventSize)
	if !ok {
		return errnoFault
	}
	r, _ := ctx.Value(runKey{}).(*runState)
	le := binary.LittleEndian

	// Find what is ready now and the earliest clock.
	var ready []int
	earliest := time.Duration(-1)
	timeouts := make([]time.Duration, n)
	for i := range int(n) {
		s := subs[i*subscriptionSize:]
		switch s[8] {
		case eventFdRead, eventFdWrite:
			ready = append(ready, i)
		case eventClock:
			id, timeout, flags := le.Uint32(s[16:]), int64(le.Uint64(s[24:])), le.Uint16(s[40:])
			d := time.Duration(timeout)
			switch flags {
			case 0:
			case 1: // subscription_clock_abstime
				now, errno := clockNow(r, id)
				if errno != errnoSuccess {
					return errno
				}
				d = time.Duration(timeout - now)
			default:
				return errnoInval
			}
			d = max(d, 0)
			timeouts[i] = d
			if earliest < 0 || d < earliest {
				earliest = d
			}
		default:
			return errnoInval
		}
	}
	if len(ready) == 0 {
		if r != nil && r.sleep != nil {
			// Until the guest's alarm, if it comes first: its handler runs
			// once the guest is back, the sleep reported done (WASI's C
			// library has no EINTR for it).
			wait := int64(earliest)
			if when, ok := r.alarm.due(ctx, mod); ok && r.nanotime != nil {
				wait = min(wait, max(when-r.nanotime(), 0))
			}
			r.sleep(wait)
			r.ring(ctx, mod)
		}
		for i := range int(n) {
			if subs[i*subscriptionSize+8] == eventClock && timeouts[i] <= earliest {
				ready = append(ready, i)
			}
		}
	}
	for k, i := range ready {
		s, e := subs[i*subscriptionSize:], events[k*eventSize:(k+1)*eventSize]
		clear(e)
		copy(e[0:8], s[0:8]) // userdata
		e[10] = s[8]         // type
		if s[8] != eventClock {
			le.PutUint64(e[16:], 1) // nbytes: at least one, as far as we know
		}
	}
	if !mem.WriteUint32Le(resultPtr, uint32(len(ready))) {
		return errnoFault
	}
	return errnoSuccess
}

// clockNow reads the run's clock id in nanoseconds.
func clockNow(r *runState, id uint32) (int64, uint32) {
	if r == nil || r.walltime == nil {
		return 0, errnoNotsup
	}
	switch id {
	case clockRealtime:
		sec, nsec := r.walltime()
		return sec*1e9 + int64(nsec), errnoSuccess
	case clockMonotonic:
		return r.nanotime(), errnoSuccess
	}
	return 0, errnoInval
}
