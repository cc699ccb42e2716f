package sandbox

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/internal/errnoshim"
	"github.com/fumehood/fumehood/internal/fuel"
)

// Defaults applied when a Config leaves a field zero.
const (
	// DefaultTimeout bounds a run's wall time.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxOutput bounds how much of each of stdout and stderr is
	// captured in a Result.
	DefaultMaxOutput = 1 << 20
)

// Config describes one run. The zero value (or nil) is a clean room: no
// arguments beyond the program name, an empty environment, empty stdin,
// DefaultTimeout, DefaultFuel, DefaultMaxOutput and the guest's memory
// limit.
type Config struct {
	// Args are the program's arguments after its name. For the Python
	// guest they become sys.argv[1:].
	Args []string
	// ScriptName names the code of a one-shot Python run (Guest.Run,
	// Sandbox.Run) in tracebacks and as sys.argv[0], such as the file it
	// was read from; empty means "<string>", with sys.argv[0] "-c", as for
	// python -c. Sessions name each run's code themselves and ignore it.
	ScriptName string
	// Env is the guest's whole environment. Keys must not be empty or
	// contain '=' or NUL.
	Env map[string]string
	// Stdin is the guest's standard input; nil means empty. A reader that
	// can block (a pipe, a network stream) is read on a helper goroutine so
	// that the deadline can interrupt the guest.
	Stdin io.Reader
	// Stdout and Stderr, if set, receive the guest's output as it is
	// written: exactly the bytes the Result keeps.
	Stdout, Stderr io.Writer

	// Timeout bounds the run's wall time; 0 means DefaultTimeout and a
	// negative value means no bound beyond the context's. Time the guest
	// spends sleeping counts.
	Timeout time.Duration
	// Fuel is the run's CPU budget, in WebAssembly instructions executed;
	// 0 means DefaultFuel and UnlimitedFuel lifts the bound.
	Fuel int64
	// Refill, if set, is called when the budget is spent, with the fuel
	// used so far. The fuel it returns is added to the budget and the guest
	// goes on where it was; returning 0 ends the run with ErrFuelExhausted.
	Refill func(used int64) (more int64)
	// MemoryLimit bounds the guest's linear memory in bytes; 0 means the
	// guest's Options.MemoryLimit. Growing past it fails inside the guest
	// (Python raises MemoryError).
	MemoryLimit int64
	// MaxOutput bounds how many bytes of each of stdout and stderr are
	// kept; 0 means DefaultMaxOutput. Past it output is dropped and the
	// Result says so, or, with StopAtOutputLimit, the run is stopped with
	// ErrOutputLimit.
	MaxOutput         int
	StopAtOutputLimit bool

	// Deterministic makes a run repeatable: the clocks start at
	// DeterministicEpoch and advance one nanosecond per unit of fuel (plus
	// the time slept), randomness comes from a generator seeded with Seed,
	// and PYTHONHASHSEED is 0 unless Env sets it. The same program with the
	// same input then prints the same output and uses the same fuel.
	Deterministic bool
	// Seed seeds the random source in deterministic mode.
	Seed uint64
}

// Result is what a run produced. A run that ended early still returns the
// output written until then and what it used.
type Result struct {
	// Stdout and Stderr hold the captured output, at most MaxOutput bytes each.
	Stdout, Stderr []byte
	// StdoutTruncated and StderrTruncated report output dropped past MaxOutput.
	StdoutTruncated, StderrTruncated bool
	// StdoutBytes and StderrBytes count everything the guest wrote, kept or not.
	StdoutBytes, StderrBytes int64
	// ExitCode is the guest's exit status: 0 on success, 1 for an uncaught
	// Python exception, n for SystemExit(n), and -1 when the run was
	// stopped before the guest exited.
	ExitCode int
	// Duration is the run's wall time, from instantiation to exit.
	Duration time.Duration
	// FuelUsed is the fuel the run spent.
	FuelUsed int64
	// PeakMemory is the largest size, in bytes, of the guest's linear memory.
	PeakMemory int64
	// MemoryLimitHit reports that the guest tried to grow its memory past
	// the limit at least once.
	MemoryLimitHit bool
	// Stop says what ended the run: StopExit when the guest ended it
	// itself, else the limit or failure that stopped it. The host sets it
	// from what it recorded, never from the guest's exit status or
	// output, so a guest cannot pass its own exit for a limit.
	Stop StopReason

	// Session runs only (Session.Run):

	// Value is the repr of the value of the code's last expression, when
	// the code ends in an expression whose value is not None; HasValue
	// says whether there is one. The host cuts it to at most MaxOutput
	// bytes (at a character boundary; invalid UTF-8 becomes U+FFFD), and
	// ValueTruncated says so.
	Value          string
	HasValue       bool
	ValueTruncated bool
	// Exception is the Python exception the code raised, if any, in any
	// Python run (Guest.Run and Sandbox.Run too): the error the run
	// returns. It is what the guest reported; the host caps each of its
	// texts at MaxOutput bytes and never decides Stop from it.
	Exception *Exception
	// HostCalls counts the run's calls of host functions, refused ones
	// included; HTTPRequests counts the HTTP requests it sent, each
	// redirect hop included (see SandboxConfig.HostCalls and Network).
	HostCalls, HTTPRequests int
}

// StopReason says what ended a run (Result.Stop).
type StopReason int

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

var stopNames = [...]string{"exit", "fuel", "deadline", "canceled", "memory", "output", "trap", "error", "stack"}

// String returns the reason's name: "exit", "fuel", "deadline",
// "canceled", "memory", "output", "trap", "error" or "stack".
func (s StopReason) String() string {
	if s >= 0 && int(s) < len(stopNames) {
		return stopNames[s]
	}
	return "StopReason(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText implements encoding.TextMarshaler: the reason's name.
func (s StopReason) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// stopReason is the reason for an error the host recorded when it stopped
// a run.
func stopReason(err error) StopReason {
	switch {
	case errors.Is(err, ErrFuelExhausted):
		return StopFuel
	case errors.Is(err, context.DeadlineExceeded):
		return StopDeadline
	case errors.Is(err, context.Canceled):
		return StopCanceled
	case errors.Is(err, ErrOutputLimit):
		return StopOutput
	case errors.Is(err, ErrMemoryLimit):
		return StopMemory
	}
	return StopError
}

// ExitError reports a guest that exited with a non-zero status. The Result
// returned with it holds the output.
type ExitError struct {
	// Code is the guest's exit status.
	Code int
}

// Error implements error.
func (e *ExitError) Error() string {
	return fmt.Sprintf("sandbox: guest exited with status %d", e.Code)
}

// TrapError reports a guest that stopped on a WebAssembly trap, such as an
// out-of-bounds access, unreachable code or a call stack overflow.
type TrapError struct {
	// Err is the runtime's description of the trap.
	Err error
}

// Error implements error.
func (e *TrapError) Error() string { return "sandbox: guest trapped: " + e.Err.Error() }

// Unwrap returns the runtime's error.
func (e *TrapError) Unwrap() error { return e.Err }

// Run runs Python source code in a fresh interpreter, in a fresh sandbox
// (an in-memory root holding /tmp and /work; see NewSandbox for more), and
// waits for it to finish. It needs the Python guest.
//
// The Result is nil only when the run did not start (an invalid Config, a
// closed guest, a context already done); otherwise it holds the output,
// even when the error is not nil.
//
// A Python exception the code does not catch is an *Exception, as in
// sessions: the error (errors.As) and Result.Exception, with
// Result.ExitCode 1 and the traceback on Result.Stderr too, as python
// prints it. SystemExit(n) is an *ExitError with Code n. A run stopped
// by a limit returns an error matching ErrFuelExhausted, ErrMemoryLimit,
// ErrOutputLimit, context.DeadlineExceeded or context.Canceled, and
// Result.Stop says which (Stop.Limit reports a limit).
func (g *Guest) Run(ctx context.Context, code string, cfg *Config) (*Result, error) {
	s, err := g.NewSandbox(nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Run(ctx, code, cfg)
}

// Exec runs the guest's _start function with cfg.Args as arguments after
// the program name, in a fresh sandbox, and waits for it to exit.
func (g *Guest) Exec(ctx context.Context, cfg *Config) (*Result, error) {
	s, err := g.NewSandbox(nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Exec(ctx, cfg)
}

func (g *Guest) run(ctx context.Context, code string, cfg *Config, fscfg wazero.FSConfig, sink *errnoSink, quotas, result string) (*Result, error) {
	if !g.python {
		return nil, ErrNotPython
	}
	if strings.IndexByte(code, 0) >= 0 {
		return nil, errors.New("sandbox: source code contains a NUL byte")
	}
	if strings.IndexByte(c0(cfg).ScriptName, 0) >= 0 {
		return nil, errors.New("sandbox: ScriptName contains a NUL byte")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Args = append(oneShotArgs(code, c.ScriptName, quotas, result, c.maxOutput()), c.Args...)
	return g.exec(ctx, "python", &c, fscfg, sink)
}

// startupSource is fumehood's start-up code, run before the code of every
// Python run (see startup.py); runnerSource runs a one-shot run's code.
var (
	//go:embed startup.py
	startupCore string
	//go:embed startup_patches.py
	startupPatches string
	//go:embed startup_thread.py
	startupThread string
	//go:embed startup_pwd.py
	startupPwd string
	//go:embed runner.py
	runnerSource string
	//go:embed outcome_writer.py
	outcomeWriterSource string

	startupSource = startupLazy() + startupCore
)

// startupLazy is the Python statement that gives startup.py the sources it
// compiles only when they are needed: a JSON string is a Python string
// literal.
func startupLazy() string {
	b, err := json.Marshal(map[string]string{
		"patches":                   startupPatches,
		"concurrent.futures.thread": startupThread,
		"pwd":                       startupPwd,
	})
	if err != nil {
		panic(err) // strings always marshal
	}
	return "_fumehood_lazy = " + string(b) + "\n"
}

// oneShotBootstrap is the interpreter's -c code in a one-shot run: it runs
// the start-up code and the runner, which name their functions' code
// "<fumehood>" so that their frames are not mistaken for the user's code.
const oneShotBootstrap = "exec(__import__('sys').argv[1])"

// oneShotArgs are the interpreter's arguments for running code one-shot
// under name (default "<string>") in a sandbox whose mounts quotas
// describes (Sandbox.mountQuotas), before the program's own arguments.
// The runner writes an exception's outcome at the guest path result, each
// text cut to maxValue+1 bytes, with outcome_writer.py (oneshot_outcome.go).
//
// -u: unbuffered, so output written before a stop is kept.
// -B: never write .pyc files.
func oneShotArgs(code, name, quotas, result string, maxValue int) []string {
	if name == "" {
		name = "<string>"
	}
	return []string{"-u", "-B", "-c", oneShotBootstrap, startupSource + runnerSource, code, name, quotas, result, strconv.Itoa(maxValue), outcomeWriterSource}
}

// c0 is cfg, or the zero Config for nil.
func c0(cfg *Config) *Config {
	if cfg == nil {
		return &Config{}
	}
	return cfg
}

func (g *Guest) execConfig(ctx context.Context, cfg *Config, fscfg wazero.FSConfig, sink *errnoSink) (*Result, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	name := "guest"
	if g.python {
		name = "python"
	}
	return g.exec(ctx, name, &c, fscfg, sink)
}

func (g *Guest) exec(ctx context.Context, name string, c *Config, fscfg wazero.FSConfig, sink *errnoSink) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := g.checkConfig(c); err != nil {
		return nil, err
	}
	ctx, cancelDeadline := c.deadline(ctx)
	defer cancelDeadline()

	r := &runState{ctx: ctx, refill: c.Refill}
	host, err := beginHost(ctx) // host calls: hostcall.go
	if err != nil {
		return nil, err
	}
	defer host.finish(nil)
	mc, err := g.moduleConfig(ctx, name, c, r)
	if err != nil {
		return nil, err
	}
	maxOut := c.maxOutput()
	stdout := &capture{max: maxOut, tee: c.Stdout}
	stderr := &capture{max: maxOut, tee: c.Stderr}
	if c.StopAtOutputLimit {
		stdout.stop, stderr.stop = r.stop, r.stop
	}
	mc = mc.WithStdout(stdout).WithStderr(stderr)
	if fscfg != nil {
		mc = mc.WithFSConfig(fscfg)
	}

	memLimit := c.MemoryLimit
	if memLimit == 0 {
		memLimit = g.memoryLimit
	}
	alloc := &memoryAllocator{limit: uint64(memLimit)}
	budget := c.fuel()

	start := time.Now()
	runErr := g.start(ctx, mc, r, alloc, budget, sink)
	res := &Result{
		Stdout: stdout.buf.Bytes(), StdoutTruncated: stdout.truncated, StdoutBytes: stdout.total,
		Stderr: stderr.buf.Bytes(), StderrTruncated: stderr.truncated, StderrBytes: stderr.total,
		Duration: time.Since(start),
		FuelUsed: r.fuelUsed(),
	}
	host.finish(res)
	if m := alloc.mem; m != nil {
		res.PeakMemory = int64(m.peak)
		res.MemoryLimitHit = m.refused > 0
	}
	return res, classify(res, r, runErr)
}

// deadline applies the run's Timeout (or DefaultTimeout) to ctx.
func (c *Config) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

// fuel returns the run's fuel budget, DefaultFuel if it sets none.
func (c *Config) fuel() int64 {
	if c.Fuel == 0 {
		return DefaultFuel
	}
	return c.Fuel
}

// maxOutput returns the bound of each captured stream.
func (c *Config) maxOutput() int {
	if c.MaxOutput == 0 {
		return DefaultMaxOutput
	}
	return c.MaxOutput
}

func (g *Guest) checkConfig(c *Config) error {
	limit := c.MemoryLimit
	if limit == 0 {
		limit = g.memoryLimit
	}
	switch {
	case c.MaxOutput < 0:
		return fmt.Errorf("sandbox: negative MaxOutput %d", c.MaxOutput)
	case c.Fuel < 0:
		return fmt.Errorf("sandbox: negative Fuel %d", c.Fuel)
	case c.MemoryLimit < 0 || c.MemoryLimit > 1<<32:
		return fmt.Errorf("sandbox: MemoryLimit %d is outside 0 to 4 GiB", c.MemoryLimit)
	case limit < g.minMemory:
		// Also with the guest's default limit: the allocator cannot refuse
		// the first allocation, so such a module must not start at all.
		return fmt.Errorf("%w: the guest needs %d bytes of memory to start, the limit is %d", ErrMemoryLimit, g.minMemory, limit)
	}
	return nil
}

// start instantiates the guest, arms its fuel and watchdog, and calls _start.
func (g *Guest) start(ctx context.Context, mc wazero.ModuleConfig, r *runState, alloc *memoryAllocator, budget int64, sink *errnoSink) (err error) {
	defer func() {
		// wazero turns guest faults into errors; this is the last line of
		// defence for the host process.
		if p := recover(); p != nil {
			err = fmt.Errorf("sandbox: internal error: %v", p)
		}
	}()
	ctx = context.WithValue(ctx, runKey{}, r)
	mod, err := g.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, alloc), g.compiled, mc)
	if err != nil {
		if g.isClosed() {
			return ErrClosed
		}
		return err
	}
	defer mod.Close(context.WithoutCancel(ctx))

	fuelGlobal, _ := mod.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal)
	errnoGlobal, _ := mod.ExportedGlobal(errnoshim.GlobalName).(api.MutableGlobal)
	defer r.supervise(ctx, fuelGlobal, errnoGlobal, budget, sink)()
	_, err = mod.ExportedFunction("_start").Call(ctx)
	return g.stack.check(mod, err)
}

// classify turns the runtime's error into the package's and fills in the
// exit code and Result.Stop. Only what the host recorded decides a limit:
// the reason it stopped the run for, the allocator's refusals, a trap.
// Whatever status the guest exits with is its own exit: wazero's exit
// codes for a closed context (sys.ExitCodeDeadlineExceeded and
// sys.ExitCodeContextCanceled) come only from proc_exit here, since the
// runtime does not close modules on context done.
func classify(res *Result, r *runState, err error) error {
	res.ExitCode = -1
	r.mu.Lock()
	stopped := r.stopped
	r.mu.Unlock()
	if stopped != nil {
		// The host stopped the run; its reason is the error, whatever
		// wazero reported on the way out.
		res.Stop = stopReason(stopped)
		if errors.Is(stopped, context.DeadlineExceeded) {
			return fmt.Errorf("sandbox: run stopped after %v: %w", res.Duration.Round(time.Millisecond), stopped)
		}
		return fmt.Errorf("sandbox: run stopped: %w", stopped)
	}
	res.Stop = StopExit
	if err == nil {
		res.ExitCode = 0
		return nil
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		res.ExitCode = int(exit.ExitCode())
		if res.ExitCode == 0 {
			return nil
		}
		err = &ExitError{Code: res.ExitCode}
	} else if errors.Is(err, ErrClosed) || strings.HasPrefix(err.Error(), "sandbox:") {
		res.Stop = stopReason(err)
		return err
	} else {
		res.Stop = StopTrap
		if errors.Is(err, ErrStackOverflow) {
			res.Stop = StopStack
		}
		err = &TrapError{Err: err}
	}
	if res.MemoryLimitHit {
		// The guest failed after being refused memory: say why.
		res.Stop = StopMemory
		return fmt.Errorf("%w: %w", ErrMemoryLimit, err)
	}
	return err
}

func (g *Guest) moduleConfig(ctx context.Context, name string, c *Config, r *runState) (wazero.ModuleConfig, error) {
	args := append([]string{name}, c.Args...)
	for i, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("sandbox: argument %d contains a NUL byte", i)
		}
	}
	mc := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithArgs(args...).
		WithStdin(newStdin(ctx, c.Stdin)).
		WithOsyield(func() {})
	env := c.Env
	if c.Deterministic {
		if !g.fuel {
			return nil, errNoFuel
		}
		r.setClocks(ctx, true, 0, nil)
		mc = mc.WithWalltime(r.walltime, sys.ClockResolution(1)).
			WithNanotime(r.nanotime, sys.ClockResolution(1)).
			WithNanosleep(r.sleep).
			WithRandSource(seededRand(c.Seed))
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
		v := env[k]
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("sandbox: invalid environment variable %q", k)
		}
		mc = mc.WithEnv(k, v)
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
