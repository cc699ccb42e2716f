package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fumehood/fumehood/internal/hostchan"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/hostcall"
	"github.com/fumehood/fumehood/internal/errnoshim"
	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/snapshot"
	"github.com/fumehood/fumehood/netpolicy"
)

//go:embed driver.py
var driverOnly string

// driverSource is what a session's interpreter runs: the start-up code
// every Python run gets (startup.py), then the driver. The base image's
// cache name covers it (baseFileName).
var driverSource = startupSource + driverOnly

// ControlPath is where a session's driver writes the outcome of each run:
// an in-memory directory of fumehood's own. Mounts may not use it.
const ControlPath = "/.fumehood"

// Errors of sessions.
var (
	// ErrNoSessions reports NewSession or ResumeSession on a guest compiled
	// without Options.Sessions.
	ErrNoSessions = errors.New("sandbox: the guest was not compiled for sessions (set Options.Sessions)")
	// ErrSessionClosed reports use of a closed session, or of one that a
	// failed run could not roll back.
	ErrSessionClosed = errors.New("sandbox: session is closed")
	// ErrOpenFiles reports a snapshot, fork or hibernation refused, or a
	// resume or fork that failed, because of a descriptor the guest holds
	// open that cannot be opened again (a file deleted while open, say).
	// The error is an *OpenFileError naming the descriptor and its path.
	ErrOpenFiles = errors.New("sandbox: an open file cannot be carried over")
)

// Exception is a Python exception that ended a run's code. Every Python
// run reports it the same way: Guest.Run, Sandbox.Run and Session.Run
// return it (errors.As) and put it in Result.Exception; Result.ExitCode is
// 1 and the traceback is on Result.Stderr too, as python prints it. A
// session goes on after it. It is what the guest reported: the host cuts
// each of Type, Message and Traceback to at most the run's MaxOutput
// bytes, as it cuts Result.Value, and never decides Result.Stop from it.
type Exception struct {
	// Type is the exception's class, qualified by its module unless it is
	// a builtin or defined by the run's code: "ZeroDivisionError",
	// "json.decoder.JSONDecodeError".
	Type string `json:"type"`
	// Message is str() of the exception.
	Message string `json:"message"`
	// Traceback is the formatted traceback, as Python prints it, without
	// the driver's own frames.
	Traceback string `json:"traceback"`
	// Truncated reports that Type, Message or Traceback was cut to
	// MaxOutput bytes.
	Truncated bool `json:"truncated,omitempty"`
}

// Error implements error: "python: Type: message".
func (e *Exception) Error() string {
	if e.Message == "" {
		return "python: " + e.Type
	}
	return "python: " + e.Type + ": " + e.Message
}

// SessionConfig describes a session. The zero value (or nil) is a clean
// room like a Sandbox's: an in-memory root holding /tmp and /work, an empty
// environment, the guest's memory limit, and no bound on the fuel of the
// whole session beyond each run's.
type SessionConfig struct {
	// Mounts and RootQuota are as in SandboxConfig. A session's in-memory
	// root is part of its snapshots; mounted filesystems (volumes) are not.
	Mounts    []Mount
	RootQuota Quota
	// Env is the interpreter's whole environment (os.environ): nothing of
	// the base image's shows. At most 4,096 variables and 512 KiB, what a
	// snapshot holds.
	Env map[string]string
	// MemoryLimit bounds the session's linear memory in bytes; 0 means the
	// guest's Options.MemoryLimit. A run's Config.MemoryLimit cannot raise it.
	MemoryLimit int64
	// Fuel bounds the fuel of all the session's runs together; 0 means no
	// bound beyond each run's Config.Fuel.
	Fuel int64
	// Deterministic makes the session repeatable, as Config.Deterministic
	// does for a run: clocks advance with the fuel used, randomness comes
	// from Seed. A fork's seed is drawn from its parent's random stream; a
	// resumed session's stream derives from Seed and its run count.
	Deterministic bool
	Seed          uint64
	// HostCalls, Network and Logger are as in SandboxConfig: host
	// functions (`import fumehood`) and the network policy, for every run.
	HostCalls *hostcall.Config
	Network   *netpolicy.Policy
	Logger    *slog.Logger
}

// Session is a live Python interpreter whose state (variables, imports,
// functions, files in its in-memory root) lasts from one run to the next.
// It can be snapshotted to bytes and resumed later, in this process or
// another, and forked into independent copies.
//
// Between runs the interpreter is paused: it holds memory but no goroutine.
// A run stopped by a limit (deadline, fuel, output, memory) or a trap rolls
// the session back to where it was before that run: variables are as they
// were; files the run wrote stay written.
//
// Files and directories the guest holds open between runs (a sqlite3
// connection, a logging.FileHandler) are carried by snapshots, forks,
// hibernation and rollbacks: a new instance opens each again at the same
// descriptor number, path, access, flags and offset it had when the last
// run ended. A fork's in-memory root is a copy, so its open files there
// are its own; a volume's files are the same for both. Only what cannot be
// opened again (a file deleted while open) stops a snapshot, fork or
// hibernation, with an *OpenFileError; a rollback or a wake from
// hibernation leaves such a descriptor closed.
//
// A Session is safe for use by one goroutine at a time; calls from several
// goroutines are serialized. Close it to release its memory.
type Session struct {
	g   *Guest
	cfg SessionConfig

	mu sync.Mutex
	// stopRun cancels the run in progress, if any, so that Close need not
	// wait for its deadline. It has its own lock: mu is held by the run.
	stopMu  sync.Mutex
	stopRun context.CancelFunc
	closed  bool
	reason  error // why the session was closed, if not by Close

	sb     *Sandbox
	root   afero.Fs // the in-memory root, nil when a mount replaces it
	ctl    afero.Fs // the control directory
	layout []snapshot.Mount
	base   *baseImage
	ckpt   *checkpoint
	// fds are the descriptors open at the checkpoint, which a new
	// instance opens again.
	fds     []snapshot.Descriptor
	inst    *instance
	env     map[string]string
	runs    int64
	fuel    int64         // fuel used by all runs
	slept   time.Duration // deterministic clock: time slept by all runs
	reseed  bool          // send a new random seed with the next run
	sendEnv bool          // send the environment with the next run
	rand    io.Reader     // the session's random source
}

// instance is one wazero instance of the session build and the host side
// of its stdin, which pauses and resumes it.
type instance struct {
	mod api.Module
	mem *memoryAllocator

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
		if _, err := in.ctl.Stat(strings.TrimPrefix(in.resultAt, ControlPath)); err != nil {
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
	}
}

// linear returns the instance's memory as a byte slice.
func (in *instance) linear() []byte { return in.mem.mem.buf }

// newInstance instantiates the session build with the session's I/O. It
// does not start it.
func (g *Guest) newInstance(ctx context.Context, fscfg wazero.FSConfig, clocks *sessionClock, rnd io.Reader, env map[string]string, args []string, memLimit, reserve uint64) (*instance, error) {
	in := &instance{mem: &memoryAllocator{limit: memLimit, reserve: reserve}, stack: g.stack}
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
	for name, f := range map[string]*api.Function{
		"asyncify_start_unwind": &in.unwind, "asyncify_stop_unwind": &in.stopUnwind,
		"asyncify_start_rewind": &in.rewind, "asyncify_stop_rewind": &in.stopRewind, "_start": &in.start,
	} {
		if *f = mod.ExportedFunction(name); *f == nil {
			mod.Close(ctx)
			return nil, fmt.Errorf("%w: the session build exports no %s", ErrInvalidModule, name)
		}
	}
	in.fuelGlobal, _ = mod.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal)
	in.errnoGlobal, _ = mod.ExportedGlobal(errnoshim.GlobalName).(api.MutableGlobal)
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
	return DeterministicEpoch.Unix(), 0
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

// driverArgs are the interpreter's arguments in a session.
func driverArgs() []string { return []string{"python", "-u", "-B", "-c", driverSource} }

// NewSession starts a session: a fresh interpreter from the guest's base
// image for the session's mount layout (taken at the first NewSession of
// that layout, in about half a second), with a fresh random seed (for the
// random module and tempfile's names) and exactly cfg.Env as environment.
func (g *Guest) NewSession(ctx context.Context, cfg *SessionConfig) (*Session, error) {
	s, err := g.prepareSession(cfg, nil)
	if err != nil {
		return nil, err
	}
	base, err := g.base(ctx, s.layout)
	if err != nil {
		return nil, err
	}
	s.base = base
	s.ckpt = &checkpoint{size: uint64(len(base.mem)), globals: append([]uint64(nil), base.globals...)}
	s.sendEnv, s.reseed = true, true
	if err := s.instantiate(ctx, true); err != nil {
		return nil, err
	}
	return s, nil
}

// prepareSession checks cfg and sets up a session's filesystem and layout.
//
// fill, if not nil, fills the in-memory root instead of the usual /tmp and
// /work.
func (g *Guest) prepareSession(cfg *SessionConfig, fill func(afero.Fs) error) (*Session, error) {
	if !g.sessions {
		return nil, ErrNoSessions
	}
	if g.isClosed() {
		return nil, ErrClosed
	}
	var c SessionConfig
	if cfg != nil {
		c = *cfg
	}
	switch {
	case c.MemoryLimit < 0 || c.MemoryLimit > 1<<32:
		return nil, fmt.Errorf("sandbox: MemoryLimit %d is outside 0 to 4 GiB", c.MemoryLimit)
	case c.Fuel < 0:
		return nil, fmt.Errorf("sandbox: negative Fuel %d", c.Fuel)
	}
	if c.MemoryLimit == 0 {
		c.MemoryLimit = g.memoryLimit
	}
	if err := checkEnv(c.Env); err != nil {
		return nil, err
	}
	for _, m := range c.Mounts {
		if m.Path == ControlPath || hasPrefixPath(m.Path, ControlPath) {
			return nil, fmt.Errorf("sandbox: mount path %s is reserved for the session driver", m.Path)
		}
	}
	mounts := append([]Mount(nil), c.Mounts...)
	var root afero.Fs
	if !slices.ContainsFunc(mounts, func(m Mount) bool { return m.Path == "/" }) {
		q := c.RootQuota
		if q == (Quota{}) {
			q = DefaultRootQuota
		}
		root = afero.NewMemMapFs()
		if fill != nil {
			if err := fill(root); err != nil {
				return nil, err
			}
		} else if err := makeRoot(root); err != nil {
			return nil, err
		}
		mounts = append([]Mount{{Path: "/", FS: root, Quota: q}}, mounts...)
	}
	ctl := afero.NewMemMapFs()
	mounts = append(mounts, Mount{Path: ControlPath, FS: ctl, Quota: Quota{MaxBytes: 64 << 20, MaxFiles: 16}})
	sb, err := g.newSandbox(&SandboxConfig{Mounts: mounts, HostCalls: c.HostCalls, Network: c.Network, Logger: c.Logger}, true)
	if err != nil {
		return nil, err
	}
	s := &Session{g: g, cfg: c, sb: sb, ctl: ctl, env: c.Env, root: root}
	for _, m := range sb.order {
		s.layout = append(s.layout, snapshot.Mount{Path: m.path, ReadOnly: m.fs.ReadOnly(), InMemory: m.path == "/" && root != nil})
	}
	if sb.host != nil {
		// The host-call channel is mounted after the others.
		s.layout = append(s.layout, snapshot.Mount{Path: HostMountPath, ReadOnly: true})
	}
	if c.Deterministic {
		s.rand = seededRand(c.Seed)
	} else {
		s.rand = rand.Reader
	}
	return s, nil
}

// maxEnvBytes bounds a session's environment, keys and values: half of
// what a snapshot's header may hold.
const maxEnvBytes = snapshot.MaxHeader / 2

// checkEnv checks a session's environment: valid names and values, and no
// more than a snapshot's header can hold, so that every session can be
// snapshotted.
func checkEnv(env map[string]string) error {
	n := 0
	for _, k := range sortedKeys(env) {
		if k == "" || bytes.ContainsAny([]byte(k), "=\x00") || bytes.IndexByte([]byte(env[k]), 0) >= 0 {
			return fmt.Errorf("sandbox: invalid environment variable %q", k)
		}
		n += len(k) + len(env[k])
	}
	if len(env) > snapshot.MaxEnv || n > maxEnvBytes {
		return fmt.Errorf("sandbox: an environment of %d variables and %d bytes (at most %d and %d)", len(env), n, snapshot.MaxEnv, maxEnvBytes)
	}
	return nil
}

// deriveSeed gives the random stream of a resumed deterministic session:
// from its seed and its run count, so that it does not replay the stream
// the session started with, and is the same on every resume of the same
// snapshot.
func deriveSeed(seed uint64, runs int64) uint64 {
	var b [8 + 8 + 24]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(runs))
	copy(b[16:], "fumehood resumed session")
	sum := sha256.Sum256(b[:])
	return binary.LittleEndian.Uint64(sum[:])
}

func hasPrefixPath(p, dir string) bool {
	return len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/'
}

// buildBase starts the interpreter in a stand-in of the layout (empty
// in-memory filesystems at the same paths), deterministically, and keeps
// its state at the driver's first read.
func (g *Guest) buildBase(ctx context.Context, layout []snapshot.Mount) (*baseImage, error) {
	var mounts []Mount
	for _, m := range layout {
		fs := afero.NewMemMapFs()
		if m.Path == "/" {
			if err := makeRoot(fs); err != nil {
				return nil, err
			}
		}
		// Start-up records what it stats (the import system keeps the
		// times of directories), so every time is fixed.
		if err := afero.Walk(fs, "/", func(p string, _ iofs.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return fs.Chtimes(p, DeterministicEpoch, DeterministicEpoch)
		}); err != nil {
			return nil, err
		}
		mounts = append(mounts, Mount{Path: m.Path, FS: fs, ReadOnly: m.ReadOnly})
	}
	sb, err := g.newSandbox(&SandboxConfig{Mounts: mounts}, true)
	if err != nil {
		return nil, err
	}
	var in *instance
	clock := &sessionClock{in: &in}
	in, err = g.newInstance(ctx, sb.fscfg, clock, seededRand(0), map[string]string{"PYTHONHASHSEED": "0"}, driverArgs(), uint64(g.memoryLimit), 0)
	if err != nil {
		return nil, err
	}
	defer in.close()
	r := &runState{ctx: ctx}
	r.setClocks(ctx, true, 0, nil)
	var stderr bytes.Buffer
	in.stderr.w = &stderr
	if err := in.call(ctx, r, DefaultFuel, &sb.errno, false); err != nil {
		return nil, fmt.Errorf("sandbox: starting the session interpreter: %w (stderr: %q)", err, stderr.String())
	}
	mem := bytes.Clone(in.linear())
	globals := getGlobals(in.mod, g.globals)
	b := &baseImage{layout: layoutKey(layout), mem: mem, globals: globals, buf: in.buf}
	b.digest = digestImage(mem, globals, in.buf)

	if err := g.freshPages(ctx, b); err != nil {
		return nil, err
	}
	return b, nil
}

// freshPages finds the pages a restore must write: those where the base
// image differs from the memory of a freshly instantiated module.
func (g *Guest) freshPages(ctx context.Context, b *baseImage) error {
	var in *instance
	fresh, err := g.newInstance(ctx, wazero.NewFSConfig(), &sessionClock{in: &in}, seededRand(0), nil, driverArgs(), uint64(g.memoryLimit), 0)
	if err != nil {
		return err
	}
	defer fresh.close()
	fm := fresh.linear()
	for i := 0; i < len(b.mem)/pageSize; i++ {
		ref := zeroPage
		if (i+1)*pageSize <= len(fm) {
			ref = fm[i*pageSize : (i+1)*pageSize]
		}
		if !bytes.Equal(b.page(i), ref) {
			b.fresh = append(b.fresh, uint32(i))
		}
	}
	return nil
}

// instantiate gives the session a new instance holding its checkpoint and
// its open descriptors (s.fds, left holding those it opened again). When
// strict, a descriptor it cannot open again is an error (an
// *OpenFileError); otherwise it is left closed.
func (s *Session) instantiate(ctx context.Context, strict bool) error {
	clock := &sessionClock{s: s, in: &s.inst}
	in, err := s.g.newInstance(ctx, s.sb.fscfg, clock, s.rand, nil, driverArgs(), uint64(s.cfg.MemoryLimit), s.ckpt.size)
	if err != nil {
		return err
	}
	if err := s.ckpt.restore(s.base, in.mod, in.linear, s.g.globals); err != nil {
		in.close()
		return err
	}
	in.buf = s.base.buf
	in.ctl = s.ctl
	kept, err := s.reopenFiles(in, s.fds, strict)
	if err != nil {
		in.close()
		return err
	}
	s.fds = kept
	s.inst = in
	return nil
}

// request is what the driver reads for one run.
type request struct {
	Code     *string           `json:"code,omitempty"`
	N        int64             `json:"n"`
	Result   string            `json:"result"`
	Seed     string            `json:"seed,omitempty"`
	Env      map[string]string `json:"env"` // not omitempty: {} clears the base image's environment
	MaxValue int               `json:"max_value"`
	// Path is put at the front of sys.path, and Site names directories
	// whose sitecustomize module is run: the fumehood module's, sent with
	// the environment.
	Path []string `json:"path,omitempty"`
	Site []string `json:"site,omitempty"`
	// Mounts describes the session's mounts and their byte quotas to the
	// start-up code (Sandbox.mountQuotas), sent with the environment and
	// the seed.
	Mounts string `json:"mounts,omitempty"`
}

// Run runs Python code in the session and waits for it to finish. When the
// code ends in an expression, Result.Value holds its repr (unless it is
// None), as in the interactive interpreter.
//
// An exception raised by the code returns an *Exception (also in
// Result.Exception); SystemExit(n) with n != 0 returns an *ExitError. Both
// leave the session as the code left it. A run stopped by a limit returns
// the limit's error, as Guest.Run does, and rolls the session back.
//
// cfg's limits apply to this run; Args, Env, Deterministic and Seed belong
// to the session and must be left zero. cfg.Stdin, if set, is what the
// code reads from sys.stdin.
func (s *Session) Run(ctx context.Context, code string, cfg *Config) (*Result, error) {
	return s.do(ctx, &code, cfg)
}

func (s *Session) do(ctx context.Context, code *string, cfg *Config) (result *Result, _ error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, s.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if len(c.Args) > 0 || c.Env != nil || c.Deterministic || c.Seed != 0 {
		return nil, errors.New("sandbox: Args, Env, Deterministic and Seed are set per session (SessionConfig), not per run")
	}
	if err := s.g.checkConfig(&c); err != nil {
		return nil, err
	}
	ctx, cancelDeadline := c.deadline(ctx)
	defer cancelDeadline()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.stopMu.Lock()
	s.stopRun = cancel
	s.stopMu.Unlock()
	defer func() {
		s.stopMu.Lock()
		s.stopRun = nil
		s.stopMu.Unlock()
	}()
	budget := c.fuel()
	if s.cfg.Fuel > 0 {
		left := s.cfg.Fuel - s.fuel
		if left <= 0 {
			return &Result{ExitCode: -1, Stop: StopFuel}, fmt.Errorf("sandbox: the session's fuel is spent: %w", ErrFuelExhausted)
		}
		budget = min(budget, left)
	}
	memLimit := uint64(s.cfg.MemoryLimit)
	if c.MemoryLimit > 0 {
		memLimit = min(memLimit, uint64(c.MemoryLimit))
	}
	maxOut := c.maxOutput()

	r := &runState{ctx: ctx, refill: c.Refill}
	// Deterministic clocks go on from where the session's last run left them.
	r.setClocks(ctx, s.cfg.Deterministic, s.fuel+int64(s.slept), func(d time.Duration) { s.slept += d })
	stdout := &capture{max: maxOut, tee: c.Stdout}
	stderr := &capture{max: maxOut, tee: c.Stderr}
	if c.StopAtOutputLimit {
		stdout.stop, stderr.stop = r.stop, r.stop
	}

	if s.inst == nil {
		// Hibernating: bring the interpreter back from the checkpoint.
		if err := s.instantiate(ctx, false); err != nil {
			return nil, err
		}
	}
	in := s.inst
	var nonce [8]byte
	rand.Read(nonce[:])
	req := request{Code: code, N: s.runs + 1, Result: ControlPath + "/result-" + hex.EncodeToString(nonce[:]), MaxValue: maxOut}
	if s.sendEnv {
		req.Env = s.env
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		if host := s.sb.host; host != nil {
			req.Path = []string{path.Join(HostMountPath, hostchan.PythonPath)}
			if host.HasNetwork() {
				req.Site = []string{path.Join(HostMountPath, hostchan.PythonSitePath)}
			}
		}
	}
	if s.sendEnv || s.reseed {
		// A new session, a fork or a resume (whose mounts' quotas may
		// differ from the saved session's).
		req.Mounts = s.sb.mountQuotas()
	}
	if s.reseed {
		var seed [32]byte
		io.ReadFull(s.rand, seed[:])
		req.Seed = hex.EncodeToString(seed[:])
	}
	body, err := json.Marshal(&req)
	if err != nil {
		return nil, err
	}
	in.pending = append([]byte(strconv.Itoa(len(body))+"\n"), body...)
	in.resultAt = req.Result
	if c.Stdin != nil {
		in.userIn = newStdin(ctx, c.Stdin)
	}
	in.stdout.w, in.stderr.w = stdout, stderr
	in.mem.mem.limit = memLimit
	refusedBefore := in.mem.mem.refused
	defer func() {
		in.stdout.w, in.stderr.w, in.userIn, in.pending = nil, nil, nil, nil
	}()

	var endHost func() hostchan.Stats
	if s.sb.host != nil {
		if endHost, err = s.sb.host.Begin(ctx); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	runErr := in.call(ctx, r, budget, &s.sb.errno, true)
	if endHost != nil {
		st := endHost()
		defer func(res **Result) {
			if *res != nil {
				(*res).HostCalls, (*res).HTTPRequests = st.Calls, st.HTTPRequests
			}
		}(&result)
	}
	res := &Result{
		Stdout: stdout.buf.Bytes(), StdoutTruncated: stdout.truncated, StdoutBytes: stdout.total,
		Stderr: stderr.buf.Bytes(), StderrTruncated: stderr.truncated, StderrBytes: stderr.total,
		Duration: time.Since(start),
		FuelUsed: r.fuelUsed(),
	}
	res.PeakMemory = int64(in.mem.mem.peak)
	res.MemoryLimitHit = in.mem.mem.refused > refusedBefore
	s.fuel += res.FuelUsed
	s.runs++
	if runErr == nil {
		out, rerr := readOutcome(s.ctl, strings.TrimPrefix(req.Result, ControlPath), maxOut)
		s.clearControl()
		if rerr != nil {
			runErr = fmt.Errorf("sandbox: reading the run's outcome: %w", rerr)
		} else {
			s.sendEnv, s.reseed = false, false
			s.ckpt.update(s.base, in.linear(), getGlobals(in.mod, s.g.globals))
			// The descriptors a rollback to this checkpoint opens again.
			// One that cannot be (deleted while open) is left out: a
			// snapshot names it, since it describes the live instance.
			s.fds = nil
			if fds, _, err := s.describeFiles(in); err == nil {
				s.fds = fds
			}
			return res, s.finish(res, out)
		}
	}
	s.clearControl()
	err = classify(res, r, runErr)
	if err == nil {
		// The interpreter exited with status 0 (os._exit(0)): the run
		// ended early all the same.
		err = &ExitError{Code: 0}
	}
	// The instance stopped mid-run: go back to the checkpoint.
	in.close()
	s.inst = nil
	if ierr := s.instantiate(context.WithoutCancel(ctx), false); ierr != nil {
		s.closeLocked(fmt.Errorf("rolling back after a stopped run: %w", ierr))
	}
	return res, err
}

// clearControl empties the control directory: the outcome just read, and
// anything the guest's code put there, which could otherwise fill its
// quota and stop the driver from reporting the next run.
func (s *Session) clearControl() {
	ctl := s.sb.controlFiles()
	entries, _ := ctl.ReadDir(ControlPath)
	for _, e := range entries {
		ctl.RemoveAll(path.Join(ControlPath, e.Name()))
	}
}

// finish fills in the Result from the driver's outcome (readOutcome's,
// whose texts are capped): the code ended the run itself.
func (s *Session) finish(res *Result, out *Result) error {
	res.Stop, res.ExitCode = StopExit, 0
	res.Value, res.HasValue, res.ValueTruncated = out.Value, out.HasValue, out.ValueTruncated
	if out.Exception != nil {
		res.Exception = out.Exception
		res.ExitCode = 1
		return out.Exception
	}
	if out.ExitCode != 0 {
		res.ExitCode = out.ExitCode
		return &ExitError{Code: out.ExitCode}
	}
	return nil
}

// Hibernate releases the session's interpreter while it is idle: only the
// pages that differ from the base image (and the in-memory files) stay in
// memory, a fraction of a live session's. The next Run, Fork or Snapshot
// works as before; Run first brings the interpreter back, in about as long
// as NewSession takes. Servers holding many idle sessions hibernate them.
//
// Files the guest holds open are opened again when it wakes, at the same
// descriptors and offsets. Hibernate fails with an *OpenFileError
// (matching ErrOpenFiles), and the session stays as it was, when one of
// them cannot be (a file deleted while open).
func (s *Session) Hibernate() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	if s.inst == nil {
		return nil
	}
	fds, err := s.carriedFiles()
	if err != nil {
		return err
	}
	s.inst.close()
	s.inst = nil
	s.fds = fds
	return nil
}

// FuelUsed returns the fuel used by all the session's runs.
func (s *Session) FuelUsed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fuel
}

// Runs returns how many runs the session has had, counting those of the
// session it was resumed or forked from.
func (s *Session) Runs() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs
}

// Close releases the session's interpreter. A closed session cannot run,
// snapshot or fork.
func (s *Session) Close() error {
	s.stopMu.Lock()
	if s.stopRun != nil {
		s.stopRun()
	}
	s.stopMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked(nil)
	return nil
}

func (s *Session) closeLocked(reason error) {
	if s.closed {
		return
	}
	s.closed, s.reason = true, reason
	s.inst.close()
	s.inst = nil
	s.ckpt = nil
	s.sb.Close()
}

func (s *Session) closedErr() error {
	if s.reason != nil {
		return fmt.Errorf("%w: %w", ErrSessionClosed, s.reason)
	}
	return ErrSessionClosed
}
