package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"
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
// DefaultTimeout and DefaultMaxOutput.
type Config struct {
	// Args are the program's arguments after its name. For the Python
	// guest they become sys.argv[1:].
	Args []string
	// Env is the guest's whole environment. Keys must not be empty or
	// contain '=' or NUL.
	Env map[string]string
	// Stdin is the guest's standard input; nil means empty.
	Stdin io.Reader
	// Stdout and Stderr, if set, receive the guest's output as it is
	// written, in addition to the bounded copy kept in the Result.
	Stdout, Stderr io.Writer
	// Timeout bounds the run's wall time; 0 means DefaultTimeout and a
	// negative value means no bound beyond the context's.
	Timeout time.Duration
	// MaxOutput bounds how many bytes of each of stdout and stderr the
	// Result keeps; 0 means DefaultMaxOutput. Output past it is dropped
	// and the Result says it was truncated.
	MaxOutput int
}

// Result is what a run produced. A run that ended early still returns the
// output written until then.
type Result struct {
	// Stdout and Stderr hold the captured output, at most MaxOutput bytes each.
	Stdout, Stderr []byte
	// StdoutTruncated and StderrTruncated report output dropped past MaxOutput.
	StdoutTruncated, StderrTruncated bool
	// ExitCode is the guest's exit status: 0 on success, 1 for an uncaught
	// Python exception, n for SystemExit(n), and -1 when the run was
	// stopped before the guest exited.
	ExitCode int
	// Duration is the run's wall time, from instantiation to exit.
	Duration time.Duration
}

// ExitError reports a guest that exited with a non-zero status. The Result
// returned with it holds the output.
type ExitError struct {
	// Code is the guest's exit status.
	Code int
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("sandbox: guest exited with status %d", e.Code)
}

// TrapError reports a guest that stopped on a WebAssembly trap, such as an
// out-of-bounds access, unreachable code or a call stack overflow.
type TrapError struct {
	// Err is the runtime's description of the trap.
	Err error
}

func (e *TrapError) Error() string { return "sandbox: guest trapped: " + e.Err.Error() }

// Unwrap returns the runtime's error.
func (e *TrapError) Unwrap() error { return e.Err }

// Run runs Python source code in a fresh interpreter and waits for it to
// finish. It needs the Python guest.
//
// A Python exception is not a Go error of its own: the traceback is on
// Result.Stderr and the error is an *ExitError with Code 1. A run stopped by
// its deadline returns an error matching context.DeadlineExceeded.
func (g *Guest) Run(ctx context.Context, code string, cfg *Config) (*Result, error) {
	if !g.python {
		return nil, ErrNotPython
	}
	if strings.IndexByte(code, 0) >= 0 {
		return nil, errors.New("sandbox: source code contains a NUL byte")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	// -u: unbuffered, so output written before a stop is kept.
	// -B: never write .pyc files.
	c.Args = append([]string{"-u", "-B", "-c", code}, c.Args...)
	return g.exec(ctx, "python", &c)
}

// Exec runs the guest's _start function with cfg.Args as arguments after
// the program name, and waits for it to exit.
func (g *Guest) Exec(ctx context.Context, cfg *Config) (*Result, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	name := "guest"
	if g.python {
		name = "python"
	}
	return g.exec(ctx, name, &c)
}

func (g *Guest) exec(ctx context.Context, name string, c *Config) (res *Result, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mc, err := moduleConfig(name, c)
	if err != nil {
		return nil, err
	}
	maxOut := c.MaxOutput
	if maxOut == 0 {
		maxOut = DefaultMaxOutput
	}
	if maxOut < 0 {
		return nil, fmt.Errorf("sandbox: negative MaxOutput %d", maxOut)
	}
	stdout := &capture{max: maxOut, tee: c.Stdout}
	stderr := &capture{max: maxOut, tee: c.Stderr}
	mc = mc.WithStdout(stdout).WithStderr(stderr)

	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}

	start := time.Now()
	runErr := g.instantiateAndStart(ctx, mc)
	res = &Result{
		Stdout: stdout.buf.Bytes(), StdoutTruncated: stdout.truncated,
		Stderr: stderr.buf.Bytes(), StderrTruncated: stderr.truncated,
		Duration: time.Since(start),
	}
	return res, classify(ctx, res, runErr)
}

func (g *Guest) instantiateAndStart(ctx context.Context, mc wazero.ModuleConfig) (err error) {
	defer func() {
		// wazero turns guest faults into errors; this is the last line of
		// defence for the host process.
		if r := recover(); r != nil {
			err = fmt.Errorf("sandbox: internal error: %v", r)
		}
	}()
	mod, err := g.rt.InstantiateModule(ctx, g.compiled, mc)
	if err != nil {
		if g.rt.Module("wasi_snapshot_preview1") == nil {
			return ErrClosed
		}
		return err
	}
	defer mod.Close(context.WithoutCancel(ctx))
	_, err = mod.ExportedFunction("_start").Call(ctx)
	return err
}

// classify turns the runtime's error into the package's and fills in the
// exit code.
func classify(ctx context.Context, res *Result, err error) error {
	res.ExitCode = -1
	if err == nil {
		res.ExitCode = 0
		return nil
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return fmt.Errorf("sandbox: run stopped after %v: %w", res.Duration.Round(time.Millisecond), context.DeadlineExceeded)
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("sandbox: run stopped: %w", context.Canceled)
		}
		res.ExitCode = int(exit.ExitCode())
		if res.ExitCode == 0 {
			return nil
		}
		return &ExitError{Code: res.ExitCode}
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("sandbox: run stopped: %w", cerr)
	}
	if errors.Is(err, ErrClosed) || strings.HasPrefix(err.Error(), "sandbox:") {
		return err
	}
	return &TrapError{Err: err}
}

func moduleConfig(name string, c *Config) (wazero.ModuleConfig, error) {
	args := append([]string{name}, c.Args...)
	for i, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("sandbox: argument %d contains a NUL byte", i)
		}
	}
	stdin := c.Stdin
	if stdin == nil {
		stdin = bytes.NewReader(nil)
	}
	mc := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithArgs(args...).
		WithStdin(stdin).
		WithSysWalltime().
		WithSysNanotime().
		WithRandSource(rand.Reader)
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := c.Env[k]
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("sandbox: invalid environment variable %q", k)
		}
		mc = mc.WithEnv(k, v)
	}
	return mc, nil
}

// capture keeps the first max bytes written to it and copies everything
// it keeps to tee.
type capture struct {
	buf       bytes.Buffer
	max       int
	truncated bool
	tee       io.Writer
	teeErr    error
}

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.max - c.buf.Len(); len(p) > room {
		p = p[:room]
		c.truncated = true
	}
	c.buf.Write(p)
	if c.tee != nil && c.teeErr == nil && len(p) > 0 {
		_, c.teeErr = c.tee.Write(p)
	}
	// The guest is told everything was written, so that a chatty program
	// is not disturbed by the bound.
	return n, nil
}
