package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/fumehood/fumehood/internal/hostchan"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"

	"github.com/fumehood/fumehood/wasi"
)

// defaultRootQuota bounds the in-memory root filesystem of a sandbox that
// sets no quota of its own. The root lives in host memory, so it is bounded
// like the guest's own memory.
var defaultRootQuota = wasi.Quota{MaxBytes: 128 << 20, MaxFiles: 10_000}

// DefaultMaxOpen bounds the files a guest may hold open at once in each
// mount (and in the in-memory root): past it, opening fails with EMFILE
// (Python's OSError with errno EMFILE). Each open file costs the host
// memory that the guest's memory limit does not count.
const DefaultMaxOpen = 1024

// DefaultMaxListingBytes bounds the host memory that the directory listings
// a guest holds open take in each mount (and in the in-memory root): a
// listing is taken when a directory handle is first read, so that it reads
// consistently, and kept until the handle is closed. Past it, reading one
// more directory fails with ENOMEM (Python's OSError with errno ENOMEM).
// Each entry counts 48 bytes plus its name: 32 MiB holds about
// 600,000 entries with 8-byte names, one listing of a directory that large
// or about 60 listings at once of a 10,000-entry directory.
const DefaultMaxListingBytes = 32 << 20

// Mount puts a filesystem at a guest path.
type Mount struct {
	// Path is where the guest sees the filesystem: an absolute, clean path
	// such as "/data". A mount at "/" replaces the in-memory root.
	// fumehood reserves /.fumehood (Python guests: where the guest reports
	// each run's outcome), /dev/fumehood (host calls and the network) and,
	// with the built guest, /usr (its standard library).
	Path string
	// FS backs the mount: afero.NewMemMapFs for scratch space, wasi.HostDir
	// for a directory of the host, wasi.Volume for persistent storage, or any other
	// afero.Fs. Nothing outside it is reachable: ".." and symbolic links
	// resolve inside it.
	FS afero.Fs
	// ReadOnly makes every change fail with EROFS (Python's OSError).
	ReadOnly bool
	// Quota bounds what the guest may store in the mount; a change past it
	// fails with ENOSPC. The zero value sets no bound: give writable host
	// mounts one.
	Quota wasi.Quota
}

// Sandbox is one clean room: a filesystem (a fresh in-memory root and the
// mounts of its Config) in which runs happen one after the other, within
// the Config's limits and environment.
// Files written by one run are there for the next, and for the host through
// Files, until Close. A Sandbox is not safe
// for concurrent use; many sandboxes may share one Guest.
type Sandbox struct {
	g      *Guest
	mounts []mounted // longest path first
	order  []mounted // in preopen order
	fscfg  wazero.FSConfig
	errno  errnoSink
	host   *hostchan.Server // nil without host functions or network
	hostFS sys.FS           // what is mounted at hostMountPath, with host
	stdlib sys.FS           // the built guest's standard library at /usr, if it has one
	ctl    afero.Fs         // the control directory of a session or a one-shot Python sandbox; nil for none
	ctlFS  *wasi.FS         // ctl as the guest sees it
	closed bool

	cfg      Config            // Limits resolved in limits
	limits   Limits            // every run's ceiling, defaults applied
	pyEnv    map[string]string // the environment of Python runs (PYTHONPATH for host calls)
	quotas   string            // the mounts and their quotas, for the start-up code (mountQuotas)
	fuelUsed int64             // by all runs, for Config.TotalFuel
	memRoot  bool              // the root is fumehood's in-memory one
	session  bool              // a session's sandbox
}

type mounted struct {
	path string
	fs   *wasi.FS
}

// NewSandbox creates a sandbox whose runs use g. Its Config is copied:
// changing cfg afterwards changes nothing.
func (g *Guest) NewSandbox(cfg *Config) (*Sandbox, error) {
	return g.newSandbox(cfg, false)
}

// newSandbox creates a sandbox. For sessions (session set), a mount may
// stand in for the host-call channel while a base image is taken.
func (g *Guest) newSandbox(cfg *Config, session bool) (*Sandbox, error) {
	c := *c0(cfg)
	limits, err := c.Limits.resolve()
	if err != nil {
		return nil, err
	}
	hasRoot, err := g.checkConfig(&c, session)
	if err != nil {
		return nil, err
	}
	mounts := c.Mounts
	if !hasRoot {
		q := c.RootQuota
		if q == (wasi.Quota{}) {
			q = defaultRootQuota
		}
		root := afero.NewMemMapFs()
		if err := makeRoot(root, c.Mounts); err != nil {
			return nil, err
		}
		mounts = append([]Mount{{Path: "/", FS: root, Quota: q}}, mounts...)
	}
	// A one-shot Python sandbox has its control directory where a
	// session has it, so that both share the base image of their layout.
	image := g.python && !session
	if image {
		mounts = append(mounts, Mount{Path: controlPath, FS: afero.NewMemMapFs(), Quota: controlQuota})
	}
	s := &Sandbox{g: g, cfg: c, limits: limits, pyEnv: c.Env, memRoot: !hasRoot, session: session}
	fscfg := wazero.NewFSConfig().(sysfs.FSConfig)
	if g.stdlib != nil {
		// The built guest's standard library: the first preopen, in every
		// sandbox and session of the guest (so that a session's file
		// descriptors are the same in its base image), read-only, shared,
		// and none of the sandbox's mounts (no quota, no host access).
		// Its device number follows the mounts', not counting the stand-in
		// of the host-call channel a session's base image mounts, so that
		// it is the same in the base image and in the session.
		dev := uint64(len(mounts) + 1)
		if slices.ContainsFunc(mounts, func(m Mount) bool { return m.Path == hostMountPath }) {
			dev--
		}
		fsys, err := wasi.NewFS(g.stdlib, wasi.Options{ReadOnly: true, ReportErrno: s.errno.report,
			MaxOpen: DefaultMaxOpen, MaxListingBytes: DefaultMaxListingBytes, Device: dev})
		if err != nil {
			return nil, fmt.Errorf("sandbox: standard library: %w", err)
		}
		fscfg = fscfg.WithSysFSMount(fsys, stdlibPath).(sysfs.FSConfig)
		s.stdlib = fsys
	}
	for i, m := range mounts {
		// Device numbers 1, 2, ... in mount order: distinct within the
		// sandbox, which is all a guest can compare, and the same in every
		// sandbox and process, so that what a guest computes from a stat
		// does not depend on how many file systems the process made before
		// (CPython caches small ints: a device number past 256 costs fuel,
		// which broke deterministic runs).
		// The FS at "/" serves /dev/null, whoever's it is: the null
		// device is the guest's, not the mount's (wasi.Options.DevNull).
		opts := wasi.Options{ReadOnly: m.ReadOnly, Quota: m.Quota, ReportErrno: s.errno.report,
			MaxOpen: DefaultMaxOpen, MaxListingBytes: DefaultMaxListingBytes, Device: uint64(i + 1),
			DevNull: m.Path == "/"}
		fsys, err := wasi.NewFS(m.FS, opts)
		if err != nil {
			return nil, fmt.Errorf("sandbox: mount %s: %w", m.Path, err)
		}
		fscfg = fscfg.WithSysFSMount(fsys, m.Path).(sysfs.FSConfig)
		s.mounts = append(s.mounts, mounted{path: m.Path, fs: fsys})
		if (session || image) && m.Path == controlPath {
			s.ctl, s.ctlFS = m.FS, fsys // the session driver's control directory
		}
	}
	s.order = append([]mounted(nil), s.mounts...)
	fscfg, err = s.mountHost(&c, fscfg)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	sort.SliceStable(s.mounts, func(i, j int) bool { return len(s.mounts[i].path) > len(s.mounts[j].path) })
	s.fscfg = fscfg.(wazero.FSConfig)
	s.quotas = s.mountQuotas()
	return s, nil
}

// checkConfig checks a sandbox's Config but its Limits, and reports
// whether a mount replaces the in-memory root. For sessions (session set),
// a mount may stand in for the host-call channel while a base image is
// taken.
func (g *Guest) checkConfig(c *Config, session bool) (hasRoot bool, _ error) {
	if c.TotalFuel < 0 {
		return false, fmt.Errorf("sandbox: negative TotalFuel %d", c.TotalFuel)
	}
	for _, k := range sortedKeys(c.Env) {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(c.Env[k], 0) >= 0 {
			return false, fmt.Errorf("sandbox: invalid environment variable %q", k)
		}
	}
	seen := map[string]bool{}
	for _, m := range c.Mounts {
		if !path.IsAbs(m.Path) || path.Clean(m.Path) != m.Path || strings.IndexByte(m.Path, 0) >= 0 {
			return false, fmt.Errorf("sandbox: mount path %q is not an absolute, clean path", m.Path)
		}
		if m.FS == nil {
			return false, fmt.Errorf("sandbox: mount %s has no filesystem", m.Path)
		}
		if seen[m.Path] {
			return false, fmt.Errorf("sandbox: two mounts at %s", m.Path)
		}
		if m.Path == hostMountPath && !session {
			return false, fmt.Errorf("sandbox: %s is reserved for the host-call channel", m.Path)
		}
		if g.python && !session && (m.Path == controlPath || hasPrefixPath(m.Path, controlPath)) {
			return false, fmt.Errorf("sandbox: %s is reserved for fumehood's control directory", m.Path)
		}
		if g.stdlib != nil && (m.Path == stdlibPath || hasPrefixPath(m.Path, stdlibPath)) {
			return false, fmt.Errorf("sandbox: %s is reserved for the Python guest's standard library", m.Path)
		}
		seen[m.Path] = true
		hasRoot = hasRoot || m.Path == "/"
	}
	return hasRoot, nil
}

// mountQuotas describes the sandbox's mounts to the guest's start-up code,
// for shutil.disk_usage: "PATH\x1fMAXBYTES" for each mount (0: no byte
// quota), joined by "\x1e". Mount paths hold no NUL, and the guest trusts
// nothing more than its own mounts' quotas to it.
func (s *Sandbox) mountQuotas() string {
	var b strings.Builder
	for i, m := range s.order {
		if i > 0 {
			b.WriteByte(0x1e)
		}
		fmt.Fprintf(&b, "%s\x1f%d", m.path, m.fs.Quota().MaxBytes)
	}
	return b.String()
}

// makeRoot gives a new in-memory root its directories: /tmp, /work, and
// the mount point of each mount that no other mount holds, so that the
// guest's os.listdir("/"), the host's Files.ReadDir("/") and fs.WalkDir
// show a mount at /data as a directory, as a mount point is on Linux.
// (The guest reaches the mount itself by its path: the directory in the
// root is only its name in the listing.)
func makeRoot(root afero.Fs, mounts []Mount) error {
	dirs := []string{"/tmp", "/work"}
	for _, m := range mounts {
		if !slices.ContainsFunc(mounts, func(o Mount) bool { _, in := within(m.Path, o.Path); return o.Path != m.Path && in }) {
			dirs = append(dirs, m.Path)
		}
	}
	for _, dir := range dirs {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// errnoSink passes the errnos that wazero cannot express (ENOSPC) from the
// sandbox's filesystems to the running guest's fumehood_errno global, which
// the guest's errno shim (internal/errnoshim) substitutes for wazero's EIO.
type errnoSink struct {
	global api.MutableGlobal // the running instance's, or nil
}

func (e *errnoSink) report(errno uint16) {
	if e.global != nil {
		e.global.Set(uint64(errno))
	}
}

// Run runs Python source code in the sandbox, as Guest.Run does, with
// args as sys.argv[1:] (sys.argv[0] is "-c", as for python -c). opts'
// Limits can only lower the sandbox's.
func (s *Sandbox) Run(ctx context.Context, code string, opts *RunOptions, args ...string) (*Result, error) {
	return s.RunScript(ctx, "", code, opts, args...)
}

// RunScript runs Python source code in the sandbox as Run does, named name
// in tracebacks and as sys.argv[0], as python FILE does (name is the file
// the code was read from, say); an empty name is "<string>", as for Run.
func (s *Sandbox) RunScript(ctx context.Context, name, code string, opts *RunOptions, args ...string) (*Result, error) {
	if s.closed {
		return nil, ErrClosed
	}
	if !s.g.python {
		return nil, ErrNotPython
	}
	if strings.IndexByte(code, 0) >= 0 {
		return nil, errors.New("sandbox: source code contains a NUL byte")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return nil, errors.New("sandbox: the script name contains a NUL byte")
	}
	if _, err := s.limits.Lower(o0(opts).Limits); err != nil {
		return nil, err
	}
	if err := checkArgs(args); err != nil {
		return nil, err
	}
	return s.runImage(ctx, name, code, opts, args)
}

// Exec runs the guest's _start in the sandbox with args after the program
// name, as Guest.Exec does; opts' Limits can only lower the sandbox's.
func (s *Sandbox) Exec(ctx context.Context, opts *RunOptions, args ...string) (*Result, error) {
	if s.closed {
		return nil, ErrClosed
	}
	name := "guest"
	if s.g.python {
		name = "python"
	}
	return s.exec(ctx, name, args, opts, false)
}

// Close discards the in-memory root. Mounted filesystems are left as they are.
func (s *Sandbox) Close() error {
	if host := s.shut(); host != nil {
		host.Close()
	}
	return nil
}

// shut closes the sandbox to its files and returns its host-call server,
// still open, for the caller to close (nil if it has none, or was shut
// before).
func (s *Sandbox) shut() *hostchan.Server {
	host := s.host
	if s.closed {
		host = nil
	}
	s.closed, s.mounts = true, nil
	return host
}
