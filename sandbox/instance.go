package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/internal/errnoshim"
	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/guests/cpython"
)

// instance is one wazero instance of a session's guest: of the session
// build and the host side of its stdin, which pauses and resumes it, or of
// a guest with the driver's entry points (drv), which needs neither.
type instance struct {
	mod api.Module
	mem *memoryAllocator
	drv *cpython.Driver // the driver's entry points, for a guest that has them

	unwind, stopUnwind, rewind, stopRewind, start api.Function
	fuelGlobal, errnoGlobal                       api.MutableGlobal
	stack                                         stackPointer

	// Set for the current call into the guest.
	ctx       context.Context
	run       *runState
	stdout    switchWriter
	stderr    switchWriter
	buf       uint32 // the asyncify buffer
	pending   []byte // the request not yet read by the driver
	userIn    io.Reader
	resultAt  string // control file the driver writes the outcome to
	ctl       afero.Fs
	rewinding bool
	unwinding bool
	failed    error // an error of the pause machinery itself
}

// switchWriter sends the guest's output to the current run's capture.
type switchWriter struct{ w io.Writer }

func (s *switchWriter) Write(p []byte) (int, error) {
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}

// Read is the guest's stdin. During a run it hands the driver its request;
// then, until the driver has written the run's outcome, it serves the
// user's code (the run's Config.Stdin, else end of file); once the outcome
// is written, the driver's read for the next request pauses the guest.
func (in *instance) Read(p []byte) (int, error) {
	if in.drv != nil {
		// Requests go through memory: stdin is the user's alone.
		if in.userIn == nil {
			return 0, io.EOF
		}
		return in.userIn.Read(p)
	}
	if in.rewinding {
		in.rewinding = false
		if _, err := in.stopRewind.Call(in.ctx); err != nil {
			in.failed = err
			return 0, err
		}
	}
	if len(in.pending) > 0 {
		n := copy(p, in.pending)
		in.pending = in.pending[n:]
		if len(in.pending) == 0 {
			in.pending = nil
		}
		return n, nil
	}
	if in.resultAt != "" {
		if _, err := in.ctl.Stat(strings.TrimPrefix(in.resultAt, controlPath)); err != nil {
			// The run's code reads stdin.
			if in.userIn == nil {
				return 0, io.EOF
			}
			return in.userIn.Read(p)
		}
	}
	return 0, in.pause()
}

// pause unwinds the guest's stack into the asyncify buffer: fd_read
// returns, then every function up to _start returns.
func (in *instance) pause() error {
	mem := in.mod.Memory()
	if in.buf == 0 {
		pages, ok := mem.Grow(asyncBufSize / wasmPage)
		if !ok {
			in.failed = fmt.Errorf("%w: no room for the session's pause buffer", ErrMemoryLimit)
			return in.failed
		}
		in.buf = pages * wasmPage
	}
	if !mem.WriteUint32Le(in.buf, in.buf+8) || !mem.WriteUint32Le(in.buf+4, in.buf+asyncBufSize) {
		in.failed = errors.New("sandbox: the pause buffer is outside memory")
		return in.failed
	}
	if _, err := in.unwind.Call(in.ctx, uint64(in.buf)); err != nil {
		in.failed = err
		return err
	}
	in.unwinding = true
	return nil
}

// call runs the guest until it pauses again: from _start at base-image
// time, else rewinding into the read it paused in.
func (in *instance) call(ctx context.Context, r *runState, budget int64, sink *errnoSink, rewind bool) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sandbox: internal error: %v", p)
		}
	}()
	ctx = context.WithValue(ctx, runKey{}, r)
	in.ctx, in.run, in.failed, in.unwinding = ctx, r, nil, false
	defer func() { in.ctx, in.run = nil, nil }()
	defer r.supervise(ctx, in.fuelGlobal, in.errnoGlobal, budget, sink)()
	if rewind {
		in.rewinding = true
		if _, err := in.rewind.Call(ctx, uint64(in.buf)); err != nil {
			return err
		}
	}
	_, err = in.start.Call(ctx)
	err = in.stack.check(in.mod, err)
	if err == nil && in.failed != nil {
		err = in.failed
	}
	if err == nil && !in.unwinding {
		err = errors.New("sandbox: the session driver exited")
	}
	if err != nil {
		return err
	}
	in.unwinding = false
	_, err = in.stopUnwind.Call(ctx)
	return err
}

func (in *instance) close() {
	if in != nil && in.mod != nil {
		in.mod.Close(context.Background())
		in.mod = nil
		if in.mem.mem != nil {
			in.mem.mem.release()
		}
	}
}

// linear returns the instance's memory as a byte slice.
func (in *instance) linear() []byte { return in.mem.mem.buf }

// newInstance instantiates the session build with the session's I/O. It
// does not start it.
func (g *Guest) newInstance(ctx context.Context, fscfg wazero.FSConfig, clocks *sessionClock, rnd io.Reader, env map[string]string, args []string, memLimit, reserve uint64) (*instance, error) {
	in := &instance{mem: &memoryAllocator{limit: memLimit, reserve: reserve, pool: &g.mems}, stack: g.stack}
	mc := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithArgs(args...).
		WithStdin(in).
		WithStdout(&in.stdout).
		WithStderr(&in.stderr).
		WithOsyield(func() {}).
		WithWalltime(clocks.walltime, sys.ClockResolution(1000)).
		WithNanotime(clocks.nanotime, sys.ClockResolution(1)).
		WithNanosleep(clocks.sleep).
		WithRandSource(rnd).
		WithFSConfig(fscfg)
	for _, k := range sortedKeys(env) {
		mc = mc.WithEnv(k, env[k])
	}
	mod, err := g.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, in.mem), g.compiled, mc)
	if err != nil {
		if g.isClosed() {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("sandbox: instantiating the session: %w", err)
	}
	in.mod = mod
	in.fuelGlobal, _ = mod.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal)
	in.errnoGlobal, _ = mod.ExportedGlobal(errnoshim.GlobalName).(api.MutableGlobal)
	if g.driver {
		if in.drv, err = cpython.Attach(mod); err != nil {
			mod.Close(ctx)
			return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
		}
		return in, nil
	}
	for name, f := range map[string]*api.Function{
		"asyncify_start_unwind": &in.unwind, "asyncify_stop_unwind": &in.stopUnwind,
		"asyncify_start_rewind": &in.rewind, "asyncify_stop_rewind": &in.stopRewind, "_start": &in.start,
	} {
		if *f = mod.ExportedFunction(name); *f == nil {
			mod.Close(ctx)
			return nil, fmt.Errorf("%w: the session build exports no %s", ErrInvalidModule, name)
		}
	}
	return in, nil
}

// sessionClock gives an instance the clocks of whichever run is current.
// Between runs nothing reads them.
type sessionClock struct {
	s     *Session // nil while a base image is taken: a fixed clock
	in    **instance
	start time.Time
}

func (c *sessionClock) current() *runState {
	if c.in == nil || *c.in == nil {
		return nil
	}
	return (*c.in).run
}

func (c *sessionClock) walltime() (int64, int32) {
	if r := c.current(); r != nil && r.walltime != nil {
		return r.walltime()
	}
	return deterministicEpoch.Unix(), 0
}

func (c *sessionClock) nanotime() int64 {
	if r := c.current(); r != nil && r.nanotime != nil {
		return r.nanotime()
	}
	return 0
}

func (c *sessionClock) sleep(ns int64) {
	if r := c.current(); r != nil && r.sleep != nil {
		r.sleep(ns)
	}
}
