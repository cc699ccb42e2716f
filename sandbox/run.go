package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/fumehood/fumehood/internal/hostchan"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/internal/errnoshim"
	"github.com/fumehood/fumehood/internal/fuel"
)

// The reasons a run ends. Each limit's reason goes with the error the run
// returns: StopFuel with ErrFuelExhausted, StopDeadline with
// context.DeadlineExceeded, and so on.
const (
	// StopExit: nothing stopped the run; the guest ended it itself.
	// Result.ExitCode is its exit status, whatever it is (124 included).
	// A session run whose code finished, raised an exception or called
	// sys.exit also ends with StopExit.
	StopExit StopReason = iota
	// StopFuel: the run spent its fuel budget, or the session's
	// (ErrFuelExhausted).
	StopFuel
	// StopDeadline: the run's Timeout or the context's deadline passed
	// (context.DeadlineExceeded).
	StopDeadline
	// StopCanceled: the context was canceled or the session closed
	// (context.Canceled).
	StopCanceled
	// StopMemory: the guest failed after its memory limit refused it
	// memory (ErrMemoryLimit).
	StopMemory
	// StopOutput: the guest wrote more than MaxOutput bytes with
	// StopAtOutputLimit set (ErrOutputLimit).
	StopOutput
	// StopTrap: the guest stopped on a WebAssembly trap (*TrapError).
	StopTrap
	// StopError: fumehood itself could not go on (a closed Guest, a
	// failure of a session's machinery); the error says what happened.
	StopError
	// StopStack: the guest ran out of stack (a *TrapError matching
	// ErrStackOverflow): its own failure, as deep recursion in C code.
	StopStack
)

// Run runs Python source code in a fresh interpreter, in a fresh sandbox
// (an in-memory root holding /tmp and /work; see NewSandbox for more)
// whose Limits are opts.Limits, and waits for it to finish. It needs the
// Python guest.
//
// The Result is nil only for invalid options or a closed guest; otherwise
// it holds the output, even when the error is not nil. A run stopped by a
// limit, even before it started (a context already done, a memory limit
// below what the guest needs), has a Result whose Stop says which.
//
// A Python exception the code does not catch is an *Exception, as in
// sessions: the error (errors.As) and Result.Exception, with
// Result.ExitCode 1 and the traceback on Result.Stderr too, as python
// prints it. SystemExit(n) is an *ExitError with Code n. A run stopped
// by a limit returns an error matching ErrFuelExhausted, ErrMemoryLimit,
// ErrOutputLimit, context.DeadlineExceeded or context.Canceled.
func (g *Guest) Run(ctx context.Context, code string, opts *RunOptions) (*Result, error) {
	s, o, err := g.oneShot(opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Run(ctx, code, o)
}

// Exec runs the guest's _start function with args after the program name,
// in a fresh sandbox whose Limits are opts.Limits, and waits for it to
// exit.
func (g *Guest) Exec(ctx context.Context, opts *RunOptions, args ...string) (*Result, error) {
	s, o, err := g.oneShot(opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Exec(ctx, o, args...)
}

// oneShot makes the sandbox of a one-shot run, whose ceiling is the run's
// Limits, and the run's options within it.
func (g *Guest) oneShot(opts *RunOptions) (*Sandbox, *RunOptions, error) {
	o := *o0(opts)
	s, err := g.NewSandbox(&Config{Limits: o.Limits})
	if err != nil {
		return nil, nil, err
	}
	o.Limits = Limits{}
	return s, &o, nil
}

// run is the host side of one run, one-shot or of a session: what begin
// prepared before the guest is entered, which end turns into the Result.
type run struct {
	sb     *Sandbox
	limits Limits // the sandbox's, lowered by the run's request
	opts   *RunOptions
	budget int64 // the run's fuel: limits.Fuel, within the sandbox's TotalFuel
	state  *runState

	stdout, stderr *capture
	endHost        func() hostchan.Stats // nil without a host-call server
	cancel         context.CancelFunc    // the run's deadline
	started        time.Time             // when the guest was entered, if it was
}

// memStats is what a run's memory allocator recorded.
type memStats struct {
	peak int64 // the largest size of the linear memory
	hit  bool  // a growth was refused for the limit
}

// begin prepares a run of the sandbox: the limits (the sandbox's, lowered
// by opts), the deadline, the captures of stdout and stderr, and the
// binding to the sandbox's host-call server. A limit reached before the
// guest is entered (the sandbox's TotalFuel spent, the context done, a
// memory limit below what the module needs) is recorded as the run's
// stop: the caller then enters nothing and end reports it. An error (an
// invalid request, a closed host-call server) means no run at all.
func (s *Sandbox) begin(ctx context.Context, opts *RunOptions) (context.Context, *run, error) {
	if s.g.isClosed() {
		return ctx, nil, ErrClosed
	}
	o := o0(opts)
	lim, err := s.limits.Lower(o.Limits)
	if err != nil {
		return ctx, nil, err
	}
	r := &run{sb: s, limits: lim, opts: o, budget: lim.Fuel}
	ctx, r.cancel = deadline(ctx, lim.Timeout)
	r.state = &runState{ctx: ctx, refill: o.Refill}
	r.stdout = &capture{max: lim.MaxOutput, tee: lines(o.Stdout)}
	r.stderr = &capture{max: lim.MaxOutput, tee: lines(o.Stderr)}
	r.state.flushOutput = func() { r.stdout.flush(); r.stderr.flush() }
	if o.StopAtOutputLimit {
		r.stdout.stop, r.stderr.stop = r.state.stop, r.state.stop
	}
	if s.host != nil {
		if r.endHost, err = s.host.Begin(ctx); err != nil {
			r.cancel()
			return ctx, nil, err
		}
	}
	switch left := s.cfg.TotalFuel - s.fuelUsed; {
	case ctx.Err() != nil:
		r.state.stop(ctx.Err())
	case s.cfg.TotalFuel > 0 && left <= 0:
		r.state.stop(fmt.Errorf("the fuel of all runs (%d) is spent: %w", s.cfg.TotalFuel, ErrFuelExhausted))
	case lim.Memory < s.g.minMemory:
		// The allocator cannot refuse the first allocation, so such a
		// module must not start at all.
		r.state.stop(fmt.Errorf("%w: the guest needs %d bytes of memory to start, the limit is %d", ErrMemoryLimit, s.g.minMemory, lim.Memory))
	case s.cfg.TotalFuel > 0:
		r.budget = min(r.budget, left)
	}
	return ctx, r, nil
}

// lines is w passing on whole lines (lineTee), or nil.
func lines(w io.Writer) io.Writer {
	if w == nil {
		return nil
	}
	return &lineTee{w: w}
}

// stopped reports whether the run was stopped already: begin found a limit
// reached, and the guest must not be entered.
func (r *run) stopped() bool {
	r.state.mu.Lock()
	defer r.state.mu.Unlock()
	return r.state.stopped != nil
}

// end builds the run's Result and error from what the host recorded: the
// output captured, the time since the guest was entered, the fuel, the
// memory, the host calls. It is the only writer of Result.Stop and
// Result.ExitCode. runErr is how the guest's call returned; out, if not
// nil, is the outcome the guest's driver reported for a run whose code
// ended it (a session's run that paused normally), applied last.
func (r *run) end(runErr error, mem memStats, out *Result) (*Result, error) {
	r.cancel()
	r.state.flushOutput()
	res := &Result{
		Stdout: r.stdout.bytes(), StdoutTruncated: r.stdout.truncated, StdoutBytes: r.stdout.total,
		Stderr: r.stderr.bytes(), StderrTruncated: r.stderr.truncated, StderrBytes: r.stderr.total,
		FuelUsed:   r.state.fuelUsed(),
		PeakMemory: mem.peak, MemoryLimitHit: mem.hit,
	}
	if !r.started.IsZero() {
		res.Duration = time.Since(r.started)
	}
	r.sb.fuelUsed += res.FuelUsed
	if r.endHost != nil {
		st := r.endHost()
		res.HostCalls, res.HTTPRequests = st.Calls, st.HTTPRequests
	}
	var err error
	res.Stop, res.ExitCode, err = classify(r.state, runErr, res.Duration, mem.hit)
	if out != nil {
		// The outcome (a Python run's value and exception): the code
		// ended the run itself, whatever the host recorded meanwhile.
		res.Value, res.HasValue, res.ValueTruncated = out.Value, out.HasValue, out.ValueTruncated
		res.Stop, res.ExitCode, err = StopExit, 0, nil
		if out.Exception != nil {
			res.Exception = out.Exception
			res.ExitCode, err = 1, out.Exception
			if mem.hit {
				// As for a one-shot run (classify): code that failed
				// after an allocation was refused failed for the limit.
				res.Stop, err = StopMemory, fmt.Errorf("%w: %w", ErrMemoryLimit, out.Exception)
			}
		} else if out.ExitCode != 0 {
			res.ExitCode, err = out.ExitCode, &ExitError{Code: out.ExitCode}
		}
	}
	if f := r.sb.g.onRun; f != nil {
		f(RunEvent{Session: r.sb.session, Result: res, Err: err})
	}
	return res, err
}

// exec runs the guest's _start in the sandbox with args after name, as
// argv, with the sandbox's environment (with python, the one for Python
// code, which finds the host-call module).
func (s *Sandbox) exec(ctx context.Context, name string, args []string, opts *RunOptions, python bool) (*Result, error) {
	if err := checkArgs(args); err != nil {
		return nil, err
	}
	ctx, r, err := s.begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	if r.stopped() {
		return r.end(nil, memStats{}, nil)
	}
	env := s.cfg.Env
	if python {
		env = s.pyEnv
	}
	mc, err := s.g.moduleConfig(ctx, append([]string{name}, args...), env, s.cfg.Deterministic, s.cfg.Seed, r.opts.Stdin, r.state)
	if err != nil {
		return r.fail(err)
	}
	mc = mc.WithStdout(r.stdout).WithStderr(r.stderr).WithFSConfig(s.fscfg)
	alloc := &memoryAllocator{limit: uint64(r.limits.Memory)}
	r.started = time.Now()
	runErr := s.g.start(ctx, mc, r.state, alloc, r.budget, &s.errno)
	var mem memStats
	if m := alloc.mem; m != nil {
		mem = memStats{peak: int64(m.peak), hit: m.refused > 0}
	}
	alloc.release() // the call returned: nothing runs in it
	return r.end(runErr, mem, nil)
}

// checkArgs refuses an argument a C program's argv cannot hold.
func checkArgs(args []string) error {
	for i, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("sandbox: argument %d contains a NUL byte", i+1)
		}
	}
	return nil
}

// deadline applies a run's timeout (negative: none) to ctx.
func deadline(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

// start instantiates the guest, arms its fuel and watchdog, and calls _start.
func (g *Guest) start(ctx context.Context, mc wazero.ModuleConfig, r *runState, alloc *memoryAllocator, budget int64, sink *errnoSink) (err error) {
	defer func() {
		// wazero turns guest faults into errors; this is the last line of
		// defence for the host process.
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errInternal, p)
		}
	}()
	ctx = context.WithValue(ctx, runKey{}, r)
	r.expect(budget) // a start function runs on the run's fuel
	mod, err := g.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, alloc), g.compiled, mc)
	if err != nil {
		if g.isClosed() {
			return ErrClosed
		}
		return err
	}
	defer mod.Close(context.WithoutCancel(ctx))
	r.invoker = g.newInvoker(mod)

	fuelGlobal, _ := mod.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal)
	errnoGlobal, _ := mod.ExportedGlobal(errnoshim.GlobalName).(api.MutableGlobal)
	defer r.supervise(ctx, fuelGlobal, errnoGlobal, budget, sink)()
	_, err = mod.ExportedFunction("_start").Call(ctx)
	return g.stack.check(mod, err)
}

// errInternal is a failure of the host's own on the guest's call: a panic
// recovered on the way out, a host function called outside a run. It is
// no trap of the guest's code: classify returns it as it is.
var errInternal = errors.New("sandbox: internal error")

// setupError is the error of a run that failed before the guest ran (its
// instance, its request, its image could not be made): classify returns
// the error it holds as it is, never as a trap.
type setupError struct{ err error }

func (e setupError) Error() string { return e.err.Error() }
func (e setupError) Unwrap() error { return e.err }

// fail ends a run that failed before the guest ran, for err.
func (r *run) fail(err error) (*Result, error) { return r.end(setupError{err}, memStats{}, nil) }

// classify turns the runtime's error into the package's and says what
// ended the run and its exit code (0-255, the low 8 bits of the status the
// guest passed to proc_exit, as a POSIX parent sees it; -1 when it was
// stopped before the guest exited). Only what the host recorded decides a limit: the reason it
// stopped the run for, the allocator's refusals (memHit), a trap.
// Whatever status the guest exits with is its own exit: wazero's exit
// codes for a closed context (sys.ExitCodeDeadlineExceeded and
// sys.ExitCodeContextCanceled) come only from proc_exit here, since the
// runtime does not close modules on context done.
func classify(r *runState, err error, d time.Duration, memHit bool) (StopReason, int, error) {
	r.mu.Lock()
	stopped := r.stopped
	r.mu.Unlock()
	if stopped != nil {
		// The host stopped the run; its reason is the error, whatever
		// wazero reported on the way out.
		if errors.Is(stopped, context.DeadlineExceeded) {
			return StopDeadline, -1, fmt.Errorf("sandbox: run stopped after %v: %w", d.Round(time.Millisecond), stopped)
		}
		return stopReason(stopped), -1, fmt.Errorf("sandbox: run stopped: %w", stopped)
	}
	if err == nil {
		return StopExit, 0, nil
	}
	var setup setupError
	if errors.As(err, &setup) {
		return stopReason(setup.err), -1, setup.err
	}
	stop, code := StopExit, -1
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		// WASI's proc_exit takes 32 bits; a POSIX parent sees the low
		// 8 (sys.exit(-1) and os._exit(-1) are 255, as python's own).
		code = int(exit.ExitCode() & 0xff)
		if code == 0 {
			return StopExit, 0, nil
		}
		err = &ExitError{Code: code}
	} else if errors.Is(err, ErrClosed) || errors.Is(err, errInternal) {
		return stopReason(err), -1, err
	} else {
		stop = StopTrap
		if errors.Is(err, ErrStackOverflow) {
			stop = StopStack
		}
		err = &TrapError{Err: err}
	}
	if memHit {
		// The guest failed after being refused memory: say why.
		return StopMemory, code, fmt.Errorf("%w: %w", ErrMemoryLimit, err)
	}
	return stop, code, err
}

// moduleConfig is the module config of a one-shot run: argv (checked by
// the caller), env, stdin and the clocks and randomness, real or
// deterministic.
func (g *Guest) moduleConfig(ctx context.Context, args []string, env map[string]string, deterministic bool, seed uint64, stdin io.Reader, r *runState) (wazero.ModuleConfig, error) {
	mc := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithArgs(args...).
		WithStdin(newStdin(ctx, stdin, r)).
		WithOsyield(func() {})
	if deterministic {
		if !g.fuel {
			return nil, errNoFuel
		}
		r.setClocks(ctx, true, 0, nil)
		mc = mc.WithWalltime(r.walltime, sys.ClockResolution(1)).
			WithNanotime(r.nanotime, sys.ClockResolution(1)).
			WithNanosleep(r.sleep).
			WithRandSource(seededRand(seed))
		if _, ok := env["PYTHONHASHSEED"]; !ok && g.python {
			env = withEnv(env, "PYTHONHASHSEED", "0")
		}
	} else {
		r.setClocks(ctx, false, 0, nil)
		mc = mc.WithWalltime(r.walltime, sys.ClockResolution(1000)).
			WithNanotime(r.nanotime, sys.ClockResolution(1)).
			WithNanosleep(r.sleep).
			WithRandSource(rand.Reader)
	}
	for _, k := range sortedKeys(env) {
		mc = mc.WithEnv(k, env[k])
	}
	return mc, nil
}

// sortedKeys returns the keys of m in order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// withEnv returns a copy of env with key set to value.
func withEnv(env map[string]string, key, value string) map[string]string {
	out := make(map[string]string, len(env)+1)
	for k, v := range env {
		out[k] = v
	}
	out[key] = value
	return out
}
