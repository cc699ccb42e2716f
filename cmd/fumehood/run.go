package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/fumehood/fumehood/guests/python"
	"github.com/fumehood/fumehood/sandbox"
)

// envFlag collects repeated --env KEY=VALUE flags.
type envFlag map[string]string

func (e envFlag) String() string { return "" }

func (e envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	e[k] = v
	return nil
}

// mountFlags collects --mount and --volume flags.
type mountFlags []sandbox.Mount

func (m *mountFlags) add(volume bool) func(string) error {
	return func(v string) error {
		readOnly := false
		if rest, ok := strings.CutSuffix(v, ":ro"); ok && !volume {
			v, readOnly = rest, true
		} else if rest, ok := strings.CutSuffix(v, ":rw"); ok && !volume {
			v = rest
		}
		host, guest, ok := strings.Cut(v, ":")
		if !ok || host == "" || !strings.HasPrefix(guest, "/") {
			return fmt.Errorf("want HOSTDIR:/GUEST/DIR, got %q", v)
		}
		dir, err := filepath.Abs(host)
		if err != nil {
			return err
		}
		if volume {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", host)
		}
		mt := sandbox.Mount{Path: path.Clean(guest), FS: sandbox.HostDir(dir), ReadOnly: readOnly}
		if !readOnly {
			mt.Quota = sandbox.DefaultVolumeQuota
		}
		*m = append(*m, mt)
		return nil
	}
}

// fileFlag is one --file flag.
type fileFlag struct{ host, guest string }

func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: fumehood run [flags] (FILE.py | -c CODE | -) [ARGS...]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	code := fs.String("c", "", "Python code to run")
	timeout := fs.Duration("timeout", sandbox.DefaultTimeout, "wall-time limit of the run")
	offline := fs.Bool("offline", false, "never download the guest; fail if it is not installed")
	cacheDir := fs.String("cache-dir", "", "cache directory (default $"+python.CacheDirEnv+" or the user cache directory)")
	fuelBudget := fs.Int64("fuel", 0, "fuel budget (WebAssembly instructions); 0 means the default")
	memory := fs.String("memory", "", "memory limit, such as 64MiB (default 256MiB)")
	maxOutput := fs.String("max-output", "", "bytes kept of each of stdout and stderr, such as 1MiB (default 1MiB); past it the run stops")
	deterministic := fs.Bool("deterministic", false, "fixed clocks, seeded randomness and hash seed: the same output and fuel on every run")
	seed := fs.Uint64("seed", 0, "random seed in --deterministic mode")
	stats := fs.Bool("stats", false, "print one JSON line of statistics on stderr after the run")
	env := envFlag{}
	fs.Var(env, "env", "set a guest environment variable, KEY=VALUE (repeatable)")
	var mounts mountFlags
	fs.Func("mount", "mount a host directory, HOSTDIR:GUESTDIR[:ro] (repeatable)", mounts.add(false))
	fs.Func("volume", "mount a persistent read-write volume, DIR:GUESTDIR; DIR is created if missing (repeatable)", mounts.add(true))
	var files []fileFlag
	fs.Func("file", "copy a host file into the sandbox before the run, HOSTFILE:GUESTPATH (repeatable)", func(v string) error {
		host, guest, ok := strings.Cut(v, ":")
		if !ok || host == "" || !strings.HasPrefix(guest, "/") {
			return fmt.Errorf("want HOSTFILE:/GUEST/PATH, got %q", v)
		}
		files = append(files, fileFlag{host, guest})
		return nil
	})
	var network networkFlags
	network.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, nil
		}
		return 0, &usageError{err.Error()}
	}
	rest := fs.Args()
	codeSet := false
	fs.Visit(func(f *flag.Flag) { codeSet = codeSet || f.Name == "c" })

	cfg := &sandbox.Config{
		Env: env, Stdout: stdout, Stderr: stderr, Timeout: *timeout,
		Fuel: *fuelBudget, Deterministic: *deterministic, Seed: *seed,
		StopAtOutputLimit: true,
	}
	if *timeout == 0 {
		cfg.Timeout = -1 // --timeout 0: no limit
	}
	if *fuelBudget < 0 {
		return 0, &usageError{"--fuel must not be negative"}
	}
	if *memory != "" {
		n, err := sandbox.ParseSize(*memory)
		if err != nil {
			return 0, &usageError{err.Error()}
		}
		cfg.MemoryLimit = n
	}
	if *maxOutput != "" {
		n, err := sandbox.ParseSize(*maxOutput)
		if err != nil || n <= 0 || n > math.MaxInt32 {
			return 0, &usageError{fmt.Sprintf("invalid --max-output %q", *maxOutput)}
		}
		cfg.MaxOutput = int(n)
	}
	var src string
	switch {
	case codeSet:
		src = *code
		cfg.Args = rest
		cfg.Stdin = stdin
	case len(rest) == 0:
		return 0, &usageError{"run needs FILE.py, -c CODE or -"}
	case rest[0] == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return 0, fmt.Errorf("reading code from stdin: %w", err)
		}
		src = string(b)
		cfg.Args = rest[1:]
	default:
		b, err := os.ReadFile(rest[0])
		if err != nil {
			return 0, err
		}
		src = string(b)
		cfg.Args = rest[1:]
		cfg.Stdin = stdin
	}

	opts := &sandbox.Options{CacheDir: *cacheDir}
	if !*offline {
		if _, _, err := python.Load(ctx, &python.Options{CacheDir: *cacheDir}); errors.Is(err, python.ErrGuestNotInstalled) {
			fmt.Fprintln(stderr, "fumehood: the Python guest is not installed; installing it now (use --offline to prevent this)")
			opts.Install = true
			opts.Progress = newProgress(stderr).report
		}
	}
	py, err := sandbox.CompilePython(ctx, opts)
	if err != nil {
		return 0, err
	}
	defer py.Close(context.WithoutCancel(ctx))

	sb, err := py.NewSandbox(&sandbox.SandboxConfig{Mounts: mounts, Network: network.policy(), Logger: quietLogger})
	if err != nil {
		return 0, err
	}
	defer sb.Close()
	for _, f := range files {
		b, err := os.ReadFile(f.host)
		if err != nil {
			return 0, err
		}
		if err := sb.MkdirAll(path.Dir(f.guest)); err != nil {
			return 0, err
		}
		if err := sb.WriteFile(f.guest, b); err != nil {
			return 0, err
		}
	}
	res, err := sb.Run(ctx, src, cfg)
	if *stats && res != nil {
		writeStats(stderr, res, err)
	}
	return exitStatus(res, err)
}

// exitStatus maps a run's outcome to the command's exit status and, for a
// stop, the words said on stderr.
func exitStatus(res *sandbox.Result, err error) (int, error) {
	var exit *sandbox.ExitError
	for _, l := range limits {
		if errors.Is(err, l.err) {
			return l.code, errors.New(l.words)
		}
	}
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.Code, nil
	}
	return exitFailure, err
}

// limits are the reasons a run is stopped, with their exit statuses.
var limits = []struct {
	err   error
	code  int
	words string
}{
	{sandbox.ErrFuelExhausted, exitFuel, "fuel exhausted"},
	{context.DeadlineExceeded, exitDeadline, "deadline exceeded"},
	{sandbox.ErrMemoryLimit, exitMemory, "memory limit"},
	{sandbox.ErrOutputLimit, exitOutput, "output limit"},
	{context.Canceled, exitCanceled, "canceled"},
}

// stats is the JSON line --stats prints.
type stats struct {
	ExitCode    int     `json:"exit_code"`
	StoppedBy   string  `json:"stopped_by,omitempty"`
	FuelUsed    int64   `json:"fuel_used"`
	WallMS      float64 `json:"wall_ms"`
	PeakMemory  int64   `json:"peak_memory_bytes"`
	StdoutBytes int64   `json:"stdout_bytes"`
	StderrBytes int64   `json:"stderr_bytes"`
	// HTTPRequests is omitted when the run had no network.
	HTTPRequests int `json:"http_requests,omitempty"`
}

func writeStats(w io.Writer, res *sandbox.Result, err error) {
	s := stats{
		ExitCode: res.ExitCode, FuelUsed: res.FuelUsed,
		WallMS:     float64(res.Duration.Microseconds()) / 1000,
		PeakMemory: res.PeakMemory, StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes,
		HTTPRequests: res.HTTPRequests,
	}
	for _, l := range limits {
		if errors.Is(err, l.err) {
			s.StoppedBy = l.words
			break
		}
	}
	b, _ := json.Marshal(s)
	fmt.Fprintf(w, "%s\n", b)
}
