package sandbox

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/internal/errnoshim"
	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/pydriver"
)

// instance is one wazero instance of the Python guest, with the driver's
// entry points (drv): a one-shot run's, a session's, or the one a base
// image is taken from. Between calls into the driver it is idle.
type instance struct {
	mod api.Module
	mem *memoryAllocator
	drv *pydriver.Driver // the driver's entry points

	fuelGlobal, errnoGlobal api.MutableGlobal
	stack                   stackPointer
	inv                     *invoker // nil if the guest has no C++ invokes

	// Set for the current call into the guest.
	ctx    context.Context
	run    *runState
	stdout switchWriter
	stderr switchWriter
	userIn io.Reader
}

// switchWriter sends the guest's output to the current run's capture.
type switchWriter struct{ w io.Writer }

func (s *switchWriter) Write(p []byte) (int, error) {
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}

// Read is the guest's stdin: requests go through memory, so it is the
// user's code's alone (the run's Config.Stdin, else end of file).
func (in *instance) Read(p []byte) (int, error) {
	if in.userIn == nil {
		return 0, io.EOF
	}
	return in.userIn.Read(p)
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

// guestArgs are the guest's WASI arguments. The driver gives the
// interpreter its own (cdriver/fhdriver.c), so nothing reads them.
var guestArgs = []string{"python"}

// newInstance instantiates the guest with the I/O of a run or session and
// attaches the driver's entry points. It does not start the interpreter.
func (g *Guest) newInstance(ctx context.Context, fscfg wazero.FSConfig, clocks *sessionClock, rnd io.Reader, env map[string]string, memLimit, reserve uint64) (*instance, error) {
	in := &instance{mem: &memoryAllocator{limit: memLimit, reserve: reserve, pool: &g.mems}, stack: g.stack}
	mc := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithArgs(guestArgs...).
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
		return nil, fmt.Errorf("sandbox: instantiating the guest: %w", err)
	}
	in.mod = mod
	in.inv = g.newInvoker(mod)
	in.fuelGlobal, _ = mod.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal)
	in.errnoGlobal, _ = mod.ExportedGlobal(errnoshim.GlobalName).(api.MutableGlobal)
	if in.drv, err = pydriver.Attach(mod); err != nil {
		mod.Close(ctx)
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
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
