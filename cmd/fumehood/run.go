package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/fumehood/fumehood/wasi"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/cache"
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

// volumeQuota is the quota the command line gives writable host
// directories and volumes: generous, but a guest cannot fill the host's
// disk.
var volumeQuota = wasi.Quota{MaxBytes: 1 << 30, MaxFiles: 100_000}

// mountFlags collects --mount and --volume flags.
type mountFlags []sandbox.Mount

// add parses --mount HOSTDIR:/GUEST/DIR[:ro|:rw] (volume false) or --volume
// DIR:/GUEST/DIR. The host directory ends at the first colon; a colon after
// the guest path starts the mode, which must be exactly ro or rw (a volume
// takes none), so a misspelt mode is an error rather than part of a
// writable guest path.
func (m *mountFlags) add(volume bool) func(string) error {
	return func(v string) error {
		host, guest, ok := strings.Cut(v, ":")
		readOnly := false
		if i := strings.LastIndexByte(guest, ':'); i >= 0 {
			mode := guest[i+1:]
			guest = guest[:i]
			switch {
			case volume:
				return fmt.Errorf("a volume is read-write and takes no mode: want DIR:/GUEST/DIR, got %q", v)
			case mode == "ro":
				readOnly = true
			case mode == "rw":
			default:
				return fmt.Errorf("unknown mount mode %q: want HOSTDIR:/GUEST/DIR, optionally followed by :ro or :rw (a guest path cannot hold a colon)", mode)
			}
		}
		if strings.Contains(guest, ":") {
			return fmt.Errorf("a guest path cannot hold a colon: want HOSTDIR:/GUEST/DIR[:ro|:rw], got %q", v)
		}
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
		fsys, err := wasi.HostDir(dir)
		if err != nil {
			return err
		}
		mt := sandbox.Mount{Path: path.Clean(guest), FS: fsys, ReadOnly: readOnly}
		if !readOnly {
			mt.Quota = volumeQuota
		}
		*m = append(*m, mt)
		return nil
	}
}

// register adds the --mount and --volume flags, which run, repl and mcp
// share.
func (m *mountFlags) register(fs *flag.FlagSet) {
	fs.Func("mount", "mount a host directory, HOSTDIR:GUESTDIR[:ro|:rw] (read-write by default, within a quota of 1 GiB and 100,000 files; repeatable)", m.add(false))
	fs.Func("volume", "mount a persistent read-write volume, DIR:GUESTDIR; DIR is created if missing (quota 1 GiB, 100,000 files; repeatable)", m.add(true))
}

// fileFlag is one --file flag.
type fileFlag struct{ host, guest string }

// common are the flags run and repl share: the guest, limits and files.
type common struct {
	onRun         func(sandbox.RunEvent) // the metrics' hook, or nil
	timeout       *time.Duration
	cacheDir      *string
	with          *string
	fuel          *int64
	memory        *string
	maxOutput     *string
	deterministic *bool
	seed          *uint64
	resume        *string
	snapshot      *string
	env           envFlag
	network       networkFlags
	mounts        mountFlags
	files         []fileFlag
}

func (c *common) register(fs *flag.FlagSet) {
	c.timeout = fs.Duration("timeout", sandbox.DefaultTimeout, "wall-time limit of a run")
	c.cacheDir = fs.String("cache-dir", "", "cache directory (default $"+cache.DirEnv+" or the user cache directory)")
	c.with = withFlag(fs)
	c.fuel = fs.Int64("fuel", 0, "fuel budget of a run (WebAssembly instructions); 0 means the default")
	c.memory = fs.String("memory", "", "memory limit, such as 64MiB (default 256MiB)")
	c.maxOutput = fs.String("max-output", "", "stop the run when it writes more than this to stdout or stderr, such as 1MiB (default: no limit; all output is passed on)")
	c.deterministic = fs.Bool("deterministic", false, "fixed clocks, seeded randomness and hash seed: the same output and fuel on every run")
	c.seed = fs.Uint64("seed", 0, "random seed in --deterministic mode")
	c.resume = fs.String("resume", "", "continue the session saved in this snapshot file")
	c.snapshot = fs.String("snapshot", "", "save the session to this snapshot file afterwards")
	c.network.register(fs)
	c.env = envFlag{}
	fs.Var(c.env, "env", "set a guest environment variable, KEY=VALUE (repeatable)")
	c.mounts.register(fs)
	fs.Func("file", "copy a host file into the sandbox before the run, HOSTFILE:GUESTPATH (repeatable)", func(v string) error {
		host, guest, ok := strings.Cut(v, ":")
		if !ok || host == "" || !strings.HasPrefix(guest, "/") {
			return fmt.Errorf("want HOSTFILE:/GUEST/PATH, got %q", v)
		}
		c.files = append(c.files, fileFlag{host, guest})
		return nil
	})
}

// config returns the options of one run and the limits of the sandbox or
// session it runs in.
func (c *common) config(stdout, stderr io.Writer) (*sandbox.RunOptions, sandbox.Limits, error) {
	// Output is passed on as it is written, all of it, as python does;
	// --max-output stops a run that writes more (the sandbox keeps at
	// most its MaxOutput of each stream for the Result in any case).
	cfg := &sandbox.RunOptions{Stdout: stdout, Stderr: stderr, StopAtOutputLimit: *c.maxOutput != ""}
	lim := sandbox.Limits{Timeout: *c.timeout, Fuel: *c.fuel}
	if *c.timeout == 0 {
		lim.Timeout = -1 // --timeout 0: no limit
	}
	if *c.fuel < 0 {
		return nil, lim, &usageError{"--fuel must not be negative"}
	}
	if *c.memory != "" {
		n, err := parseSize(*c.memory)
		if err != nil {
			return nil, lim, &usageError{err.Error()}
		}
		lim.Memory = n
	}
	if *c.maxOutput != "" {
		n, err := parseSize(*c.maxOutput)
		if err != nil || n <= 0 || n > math.MaxInt32 {
			return nil, lim, &usageError{fmt.Sprintf("invalid --max-output %q", *c.maxOutput)}
		}
		lim.MaxOutput = int(n)
	}
	return cfg, lim, nil
}

// withFlag adds the --with flag, which run, repl and mcp share.
func withFlag(fs *flag.FlagSet) *string {
	return fs.String("with", "", "the built guest's variant with these optional `PARTS`, comma-separated: numpy, pandas, matplotlib (each implies numpy), data (numpy, pandas and matplotlib); build it first: \""+
		cpython.BuildCommand+" --with PARTS\"")
}

// compile compiles the Python guest, or with --with its variant. One that
// is not built is an error naming the command that builds it.
func (c *common) compile(ctx context.Context) (*sandbox.Guest, error) {
	opts := &sandbox.Options{CacheDir: *c.cacheDir, OnRun: c.onRun}
	if c.with != nil {
		opts.With = splitList(*c.with)
	}
	return sandbox.CompilePython(ctx, opts)
}

// copyFiles copies the --file flags' files into files.
func (c *common) copyFiles(files *sandbox.Files) error {
	for _, f := range c.files {
		b, err := os.ReadFile(f.host)
		if err != nil {
			return err
		}
		if err := files.MkdirAll(path.Dir(f.guest)); err != nil {
			return err
		}
		if err := files.WriteFile(f.guest, b); err != nil {
			return err
		}
	}
	return nil
}

// sandboxConfig is the Config the flags describe, with the limits lim.
func (c *common) sandboxConfig(lim sandbox.Limits) *sandbox.Config {
	return &sandbox.Config{Mounts: c.mounts, Env: c.env, Limits: lim,
		Deterministic: *c.deterministic, Seed: *c.seed, Network: c.network.policy(), Logger: quietLogger}
}

// openSandbox makes the sandbox the flags describe, with the --file
// flags' files copied in.
func (c *common) openSandbox(g *sandbox.Guest, lim sandbox.Limits) (*sandbox.Sandbox, error) {
	sb, err := g.NewSandbox(c.sandboxConfig(lim))
	if err != nil {
		return nil, err
	}
	if err := c.copyFiles(sb.Files()); err != nil {
		sb.Close()
		return nil, err
	}
	return sb, nil
}

// openSession starts a session, or resumes the one saved with --resume.
func (c *common) openSession(ctx context.Context, py *sandbox.Guest, lim sandbox.Limits) (*sandbox.Session, error) {
	cfg := c.sandboxConfig(lim)
	var s *sandbox.Session
	var err error
	if *c.resume != "" {
		if len(c.env) > 0 || *c.deterministic {
			return nil, &usageError{"--env and --deterministic belong to the session's start, not to --resume"}
		}
		f, ferr := os.Open(*c.resume)
		if ferr != nil {
			return nil, ferr
		}
		defer f.Close()
		s, err = py.ResumeSession(ctx, bufio.NewReader(f), cfg)
	} else {
		s, err = py.NewSession(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	if err := c.copyFiles(s.Files()); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: fumehood run [flags] (FILE.py | -c CODE | -) [ARGS...]\n\n"+
			"With --resume or --snapshot the code runs in a session that continues across\n"+
			"processes, and the value of a final expression is printed.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	code := fs.String("c", "", "Python code to run")
	stats := fs.Bool("stats", false, "print one JSON line of statistics on stderr after the run")
	store := fs.String("store", "", "keep the --session in this store: a directory, file:///DIR or nats://HOST:PORT (key: $"+storeKeyEnv+")")
	session := fs.String("session", "", "run in this named session of the --store (created on first use) and commit it")
	var c common
	c.register(fs)
	if help, err := parse(fs, args); help || err != nil {
		return 0, err
	}
	rest := fs.Args()
	codeSet := false
	fs.Visit(func(f *flag.Flag) { codeSet = codeSet || f.Name == "c" })

	cfg, lim, err := c.config(stdout, stderr)
	if err != nil {
		return 0, err
	}
	var src, name string
	var progArgs []string
	switch {
	case codeSet:
		src = *code
		progArgs = rest
		cfg.Stdin = stdin
	case len(rest) == 0:
		return 0, &usageError{"run needs FILE.py, -c CODE or -"}
	case rest[0] == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return 0, fmt.Errorf("reading code from stdin: %w", err)
		}
		src = string(b)
		progArgs = rest[1:]
	default:
		b, err := os.ReadFile(rest[0])
		if err != nil {
			return 0, err
		}
		src = string(b)
		progArgs = rest[1:]
		cfg.Stdin = stdin
		name = rest[0] // sys.argv[0] and the tracebacks' file name
	}

	stored := *store != "" || *session != ""
	switch {
	case stored && (*store == "" || *session == ""):
		return 0, &usageError{"--store and --session go together"}
	case stored && (*c.resume != "" || *c.snapshot != ""):
		return 0, &usageError{"--store keeps the session: it takes no --resume or --snapshot"}
	}
	sessions := stored || *c.resume != "" || *c.snapshot != ""
	if sessions && len(progArgs) > 0 {
		return 0, &usageError{"a session run takes no ARGS"}
	}
	py, err := c.compile(ctx)
	if err != nil {
		return 0, err
	}
	defer py.Close()

	var res *sandbox.Result
	if stored {
		res, err = c.runStored(ctx, py, lim, *store, *session, src, cfg, stdout)
		if *stats && res != nil {
			writeStats(stderr, res, err)
		}
		return exitStatus(res, err)
	}
	if sessions {
		s, err := c.openSession(ctx, py, lim)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		res, err = s.Run(ctx, src, cfg)
		if res != nil && res.HasValue {
			fmt.Fprintln(stdout, res.Value)
		}
		if *c.snapshot != "" {
			if serr := s.SnapshotFile(*c.snapshot); serr != nil {
				return exitFailure, fmt.Errorf("saving the session: %w", serr)
			}
		}
		if *stats && res != nil {
			writeStats(stderr, res, err)
		}
		return exitStatus(res, err)
	}

	sb, err := c.openSandbox(py, lim)
	if err != nil {
		return 0, err
	}
	defer sb.Close()
	res, err = sb.RunScript(ctx, name, src, cfg, progArgs...)
	if *stats && res != nil {
		writeStats(stderr, res, err)
	}
	return exitStatus(res, err)
}

// exitStatus maps a run's outcome to the command's exit status and, for a
// stop, the words said on stderr. Whether a limit stopped the run is the
// host's Result.Stop, never the guest's status or output: a guest that
// exits with 124 exits with 124, and --stats says it exited on its own. A
// run that ended itself exits with its status, 1 for a Python exception
// (whose traceback is on stderr already).
func exitStatus(res *sandbox.Result, err error) (int, error) {
	if res == nil {
		// No run: invalid arguments or a closed guest (a run stopped by
		// a limit, even before it started, has a Result).
		if err == nil {
			return 0, nil
		}
		return exitFailure, err
	}
	var exit *sandbox.ExitError
	var exc *sandbox.Exception
	if res.Stop == sandbox.StopExit && (err == nil || errors.As(err, &exit) || errors.As(err, &exc)) {
		return res.ExitCode, nil
	}
	if code, words, _ := stopped(res.Stop); words != "" {
		return code, errors.New(words)
	}
	return exitFailure, err
}

// stopped gives the command's exit status and words for a run that stop
// ended, and whether --stats names it as the limit that stopped the run
// (stopped_by): the one place fumehood's exit statuses for a stop live.
// The words are empty for a stop that has none of its own: the guest's own
// exit, a trap, fumehood's failure.
func stopped(stop sandbox.StopReason) (code int, words string, limit bool) {
	switch stop {
	case sandbox.StopFuel:
		return exitFuel, "fuel exhausted", true
	case sandbox.StopDeadline:
		return exitDeadline, "deadline exceeded", true
	case sandbox.StopMemory:
		return exitMemory, "memory limit", true
	case sandbox.StopOutput:
		return exitOutput, "output limit", true
	case sandbox.StopCanceled:
		return exitCanceled, "canceled", true
	case sandbox.StopStack:
		// The guest's failure, not fumehood's.
		return exitStack, stackWords, false
	}
	return exitFailure, "", false
}

// stats is the JSON line --stats prints.
type stats struct {
	ExitCode int `json:"exit_code"`
	// Stop is what ended the run, from Result.Stop: "exit" when the guest
	// ended it itself (with exit_code), else "fuel", "deadline",
	// "canceled", "memory", "output", "trap", "error" or "stack".
	Stop string `json:"stop"`
	// StoppedBy is the limit that stopped the run, in the words of the
	// error line; omitted when none did.
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
		ExitCode: res.ExitCode, Stop: res.Stop.String(), FuelUsed: res.FuelUsed,
		WallMS:     float64(res.Duration.Microseconds()) / 1000,
		PeakMemory: res.PeakMemory, StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes,
		HTTPRequests: res.HTTPRequests,
	}
	if _, words, limit := stopped(res.Stop); limit {
		s.StoppedBy = words
	}
	b, _ := json.Marshal(s)
	fmt.Fprintf(w, "%s\n", b)
}
