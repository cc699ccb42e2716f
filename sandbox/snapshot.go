package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/afero"

	"github.com/fumehood/fumehood/internal/snapshot"
)

// Errors of ResumeSession. Each snapshot it refuses returns an error
// matching exactly one of them, with the details in its message.
var (
	// ErrSnapshotFormat reports bytes that are not a fumehood snapshot.
	ErrSnapshotFormat = snapshot.ErrFormat
	// ErrSnapshotVersion reports a snapshot of a format version this build
	// does not read.
	ErrSnapshotVersion = snapshot.ErrVersion
	// ErrSnapshotCorrupt reports a truncated or damaged snapshot.
	ErrSnapshotCorrupt = snapshot.ErrCorrupt
	// ErrSnapshotTooLarge reports a snapshot that needs more memory, or
	// more file space in its in-memory root, than the Config allows.
	ErrSnapshotTooLarge = snapshot.ErrLimit
	// ErrSnapshotGuest reports a snapshot taken with another guest build
	// (or another version of the session driver).
	ErrSnapshotGuest = errors.New("snapshot is from another guest build")
	// ErrSnapshotLayout reports a snapshot whose mount layout differs from
	// the Config's: the interpreter recorded its directories at
	// start-up, so the same paths must be mounted, read-only or not alike.
	ErrSnapshotLayout = errors.New("snapshot mount layout does not match")
)

// snapshotArgs are the arguments recorded in a snapshot: the driver's source
// is represented by its name.
var snapshotArgs = []string{"python", "-u", "-B", "-c", "<session driver>"}

// Snapshot writes the session's state to w: its memory (the pages that
// differ from the base image), the interpreter's registers, its in-memory
// root filesystem and its set-up, zstd-compressed, with a checksum. Mounted
// filesystems (volumes) are not copied: resume with the same ones mounted.
//
// The files and directories the guest holds open are recorded (mount,
// path, access, flags, offset, descriptor number) and opened again on
// resume. Snapshot fails with an *OpenFileError (matching ErrOpenFiles),
// and the session goes on, when one cannot be: a file deleted or replaced
// while open, or anything that is not a file of the session's mounts.
func (s *Session) Snapshot(w io.Writer) error {
	snap, err := s.capture()
	if err != nil {
		return err
	}
	if err := snapshot.Encode(w, snap); err != nil {
		return fmt.Errorf("sandbox: writing the snapshot: %w", err)
	}
	return nil
}

func (s *Session) capture() (*snapshot.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.settled() {
		return nil, s.closedErr()
	}
	fds, err := s.carriedFiles()
	if err != nil {
		return nil, err
	}
	if err := s.ckpt.unpack(); err != nil {
		return nil, err
	}
	snap := &snapshot.Snapshot{Header: snapshot.Header{
		Descriptors:   fds,
		Guest:         s.g.id,
		Base:          s.base.digest,
		MemorySize:    s.ckpt.size,
		Args:          snapshotArgs,
		Env:           s.env,
		Mounts:        s.layout,
		Runs:          s.runs,
		FuelUsed:      s.sb.fuelUsed,
		Deterministic: s.cfg.Deterministic,
		Seed:          s.cfg.Seed,
		ClockNanos:    int64(s.slept),
	}}
	for i, p := range s.ckpt.pages {
		if p != nil {
			snap.Pages = append(snap.Pages, snapshot.Page{Index: uint32(i), Data: p})
		}
	}
	// Snapshot encodes the pages after the lock is released, while the
	// next run's checkpoint may be taken: from now on they are shared, as
	// with a fork, and a checkpoint replaces a page it changes with a copy
	// instead of writing it in place.
	s.ckpt.share()
	if s.root != nil {
		files, err := readTree(s.root, 0)
		if err != nil {
			return nil, fmt.Errorf("sandbox: reading the in-memory root: %w", err)
		}
		snap.Files = files
	}
	return snap, nil
}

// readTree lists everything under root, parents first.
func readTree(root afero.Fs, mount int) ([]snapshot.File, error) {
	var files []snapshot.File
	err := afero.Walk(root, "/", func(p string, fi fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, "/")
		if rel == "" {
			return nil
		}
		f := snapshot.File{Mount: mount, Path: rel, Mode: uint32(fi.Mode().Perm()), ModTime: fi.ModTime().UnixNano()}
		switch {
		case fi.IsDir():
			f.Kind = snapshot.KindDir
		case fi.Mode().IsRegular():
			f.Kind = snapshot.KindFile
			data, err := afero.ReadFile(root, p)
			if err != nil {
				return err
			}
			f.Data = data
		default:
			return nil // the in-memory root holds nothing else
		}
		files = append(files, f)
		return nil
	})
	return files, err
}

// writeTree recreates files in root.
func writeTree(root afero.Fs, files []snapshot.File) error {
	w := treeWriter{root: root}
	for _, f := range files {
		if err := w.add(f, bytes.NewReader(f.Data), int64(len(f.Data))); err != nil {
			return err
		}
	}
	return w.finish()
}

// treeWriter recreates files in root one by one (add), parents first,
// then the times of the directories (finish).
type treeWriter struct {
	root afero.Fs
	dirs []dirTime
}

type dirTime struct {
	p string
	t time.Time
}

// add creates f, a file's content read from data, size bytes.
func (w *treeWriter) add(f snapshot.File, data io.Reader, size int64) error {
	p := "/" + f.Path
	mode := fs.FileMode(f.Mode).Perm()
	t := time.Unix(0, f.ModTime)
	switch f.Kind {
	case snapshot.KindDir:
		if err := w.root.MkdirAll(p, mode); err != nil {
			return err
		}
		if err := w.root.Chmod(p, mode|fs.ModeDir); err != nil {
			return err
		}
		w.dirs = append(w.dirs, dirTime{p, t})
	case snapshot.KindFile:
		if err := writeFile(w.root, p, mode, data, size); err != nil {
			return err
		}
		if err := w.root.Chtimes(p, t, t); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes size bytes of data to the file at p. The room for
// them is made first (the in-memory filesystem then appends in place
// rather than growing, and copying, its buffer at every write; its
// truncation allocates as many zeros again, dropped at once), and the
// data copied in a MiB at a time: the file's content is never held twice.
func writeFile(root afero.Fs, p string, mode fs.FileMode, data io.Reader, size int64) error {
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if size > 0 {
		if err = f.Truncate(size); err == nil {
			err = f.Truncate(0)
		}
		if err == nil {
			var n int64
			n, err = io.CopyBuffer(onlyWriter{f}, io.LimitReader(data, size), make([]byte, min(size, 1<<20)))
			if err == nil && n < size {
				err = io.ErrUnexpectedEOF
			}
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// onlyWriter hides all but Write: io.CopyBuffer then uses the buffer it
// is given.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

// finish sets the directories' times, last, since creating their entries
// changed them.
func (w *treeWriter) finish() error {
	for _, d := range w.dirs {
		if err := w.root.Chtimes(d.p, d.t, d.t); err != nil {
			return err
		}
	}
	return nil
}

// ResumeSession continues a session from a snapshot written by
// Session.Snapshot, in this process or another, on the same guest build.
// cfg must mount the same paths as the session that was snapshotted
// (volumes are not in snapshots); its limits apply from now on. The
// environment, determinism and seed come from the snapshot, and Python's
// random state (the random module, tempfile's names) is renewed, as after
// os.fork(): two resumes of one snapshot draw different values, except in
// deterministic mode, where they draw the same.
//
// A snapshot that cannot be resumed returns an error matching one of
// ErrSnapshotFormat, ErrSnapshotVersion, ErrSnapshotCorrupt,
// ErrSnapshotTooLarge, ErrSnapshotGuest or ErrSnapshotLayout. The files
// the snapshotted guest held open are opened again at their descriptors;
// one that cannot be (a volume's file that is gone) is an *OpenFileError,
// matching ErrOpenFiles. Snapshots of format version 1 (before open files
// were carried) still resume.
func (g *Guest) ResumeSession(ctx context.Context, r io.Reader, cfg *Config) (*Session, error) {
	if !g.python {
		return nil, ErrNotPython
	}
	c := *c0(cfg)
	lim, err := resumeLimits(&c)
	if err != nil {
		return nil, err
	}
	// The snapshot is decoded as it is read, its pages straight into the
	// checkpoint and its files into the session's in-memory root: a
	// restore never holds the encoded snapshot, nor its decoded form
	// besides the session's own state (see docs/SECURITY.md).
	rs := &resumer{g: g, ctx: ctx, c: c}
	err = snapshot.Stream(r, lim, rs)
	s := rs.s
	if err != nil {
		if s != nil {
			s.sb.Close()
		}
		if errors.Is(err, errResume) {
			return nil, err
		}
		return nil, fmt.Errorf("sandbox: resume: %w", err)
	}
	fail := func(err error) (*Session, error) {
		s.sb.Close()
		return nil, fmt.Errorf("sandbox: resume: %w", err)
	}
	if err := rs.tree.finish(); err != nil {
		return fail(fmt.Errorf("writing the in-memory root: %w", err))
	}
	h := rs.h
	s.runs, s.sb.fuelUsed, s.slept = h.Runs, h.FuelUsed, time.Duration(h.ClockNanos)
	if h.Deterministic {
		// Not the stream the session began with, which its memory may
		// already reflect (tempfile names, say): one of its own.
		s.rand = seededRand(deriveSeed(h.Seed, h.Runs))
	}
	s.reseed = true
	// A session snapshotted before its first run never received its
	// environment (a run sends it): the first run after the resume does.
	s.sendEnv = h.Runs == 0
	s.fds = h.Descriptors
	if err := s.instantiate(ctx, true); err != nil {
		return fail(err)
	}
	return s, nil
}

// errResume marks an error of ResumeSession that already says so.
var errResume = errors.New("sandbox: resume")

// resumer is the target of a snapshot decoded by ResumeSession: from its
// header it prepares the session, then it takes the pages into the
// checkpoint and the files into the in-memory root as they are decoded.
type resumer struct {
	g    *Guest
	ctx  context.Context
	c    Config
	h    *snapshot.Header
	s    *Session
	tree treeWriter
	slab snapshot.PageSlab
}

func (rs *resumer) Header(h *snapshot.Header) error {
	g, c := rs.g, &rs.c
	root, err := g.checkHeader(h)
	if err != nil {
		return err
	}
	rs.h = h
	c.Env, c.Deterministic, c.Seed = h.Env, h.Deterministic, h.Seed
	// The files come after the pages: the root starts empty.
	fill := func(afero.Fs) error {
		if root < 0 {
			return fmt.Errorf("%w: %w: the snapshot's root is a mount, this session's is in memory", errResume, ErrSnapshotLayout)
		}
		return nil
	}
	s, err := g.prepareSession(c, fill)
	if err != nil {
		return err
	}
	rs.s = s
	rs.tree.root = s.root
	if got, want := describeLayout(s.layout), describeLayout(h.Mounts); got != want {
		return fmt.Errorf("%w: the snapshot mounts %s, the session %s", ErrSnapshotLayout, want, got)
	}
	base, err := g.base(rs.ctx, s.layout)
	if err != nil {
		return err
	}
	ck, err := g.checkSnapshot(h, base)
	if err != nil {
		return err
	}
	s.base, s.ckpt = base, ck
	return nil
}

func (rs *resumer) Page(index uint32, data []byte) error {
	// The checkpoint's alone: updated in place, until shared.
	ck := rs.s.ckpt
	ck.pages[index], ck.owned[index] = rs.slab.Copy(data), true
	return nil
}

func (rs *resumer) File(f snapshot.File, data io.Reader, size int64) error {
	if rs.tree.root == nil {
		return fmt.Errorf("%w: a file for an in-memory root the session does not have", ErrSnapshotLayout)
	}
	return rs.tree.add(f, data, size)
}

// resumeLimits are the bounds of a snapshot a session of Config c can
// resume: its memory limit and its root's quota.
func resumeLimits(c *Config) (snapshot.Limits, error) {
	limits, err := c.Limits.resolve()
	if err != nil {
		return snapshot.Limits{}, err
	}
	lim := snapshot.Limits{MaxMemory: uint64(limits.Memory), MaxFileBytes: c.RootQuota.MaxBytes, MaxFiles: c.RootQuota.MaxFiles}
	if c.RootQuota.MaxBytes == 0 && c.RootQuota.MaxFiles == 0 {
		lim.MaxFileBytes, lim.MaxFiles = defaultRootQuota.MaxBytes, defaultRootQuota.MaxFiles
	}
	if lim.MaxFileBytes == 0 {
		lim.MaxFileBytes = 1 << 40
	}
	if lim.MaxFiles == 0 {
		lim.MaxFiles = 1 << 24
	}
	// The most a snapshot within those limits can take: Decode reads no
	// more than that, as a stream, and checks the header (at most
	// snapshot.MaxHeader) before it reads the rest.
	lim.MaxSize = int64(lim.MaxMemory) + min(lim.MaxFileBytes, 1<<40) + min(lim.MaxFiles, 1<<24)*8192 + snapshot.MaxHeader + 1<<16
	return lim, nil
}

// checkHeader checks what a snapshot's header says before a session is
// prepared for it: the guest build, the environment and where its
// in-memory root is (its index among the mounts, -1 for none).
func (g *Guest) checkHeader(h *snapshot.Header) (root int, _ error) {
	if err := checkRetired(h); err != nil {
		return -1, err
	}
	if h.Guest != g.id {
		return -1, fmt.Errorf("%w: it needs build %.12s, this guest is %.12s", ErrSnapshotGuest, h.Guest, g.id)
	}
	if err := checkEnv(h.Env); err != nil {
		return -1, fmt.Errorf("%w: %w", ErrSnapshotCorrupt, err)
	}
	root = -1
	for i, m := range h.Mounts {
		if m.InMemory {
			if m.Path != "/" || i != 0 {
				return -1, fmt.Errorf("%w: in-memory mount %d at %s", ErrSnapshotCorrupt, i, m.Path)
			}
			root = i
		}
	}
	return root, nil
}

// checkRetired refuses a snapshot or base image of the retired session
// build (Binaryen's asyncify, of the npm guest's CPython 3.12 or of `guest
// build --session`): it alone paused its interpreter, with a pause buffer
// and the guest's mutable globals in the header (and format versions 1
// and 2 knew nothing else). Its error matches ErrSnapshotGuest.
func checkRetired(h *snapshot.Header) error {
	if h.AsyncifyBuffer != 0 || len(h.Globals) > 0 {
		return fmt.Errorf("%w: it came from a build that no longer exists (the asyncify session build of the npm guest or of `guest build --session`, retired): start a new session on this guest", ErrSnapshotGuest)
	}
	return nil
}

// checkSnapshot checks a snapshot's header against the base image of its
// layout, and returns a checkpoint of its size, without pages yet.
func (g *Guest) checkSnapshot(h *snapshot.Header, base *baseImage) (*checkpoint, error) {
	if h.Base != base.digest {
		return nil, fmt.Errorf("%w: its base image %.12s differs from this build's %.12s (another session driver)", ErrSnapshotGuest, h.Base, base.digest)
	}
	if h.MemorySize < uint64(base.size) {
		return nil, fmt.Errorf("%w: memory size does not fit the base image", ErrSnapshotCorrupt)
	}
	n := h.MemorySize / pageSize
	ck := &checkpoint{size: h.MemorySize, pages: make([][]byte, n), owned: make([]bool, n)}
	return ck, nil
}

// describeLayout shows a mount layout in an error message.
func describeLayout(ms []snapshot.Mount) string {
	var parts []string
	for _, m := range ms {
		d := m.Path
		if m.ReadOnly {
			d += " (read-only)"
		}
		if m.InMemory {
			d += " (in memory)"
		}
		parts = append(parts, d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Fork returns an independent copy of the session: the same variables,
// imports and in-memory files, from here on each its own. The copy shares
// the base image and the pages both have not changed since; its random
// state (the random module, tempfile's names) is renewed, as after
// os.fork(), so forks sharing a volume do not draw the same temporary
// names. Mounted filesystems are shared, not copied.
//
// Files the guest holds open are open in the copy too, at the same
// descriptors and offsets: in the in-memory root, the copy's own files; in
// a volume, the same files. Fork fails with an *OpenFileError (matching
// ErrOpenFiles), and s goes on, when one cannot be opened again.
func (s *Session) Fork(ctx context.Context) (*Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.settled() {
		return nil, s.closedErr()
	}
	fds, err := s.carriedFiles()
	if err != nil {
		return nil, err
	}
	if err := s.ckpt.unpack(); err != nil {
		return nil, fmt.Errorf("sandbox: fork: %w", err)
	}
	var fill func(afero.Fs) error
	if s.root != nil {
		files, err := readTree(s.root, 0)
		if err != nil {
			return nil, fmt.Errorf("sandbox: fork: reading the in-memory root: %w", err)
		}
		fill = func(fsys afero.Fs) error { return writeTree(fsys, files) }
	}
	c := s.cfg
	c.Env = s.env
	if c.Deterministic {
		// The fork's seed is drawn from the parent's stream: forks
		// differ from each other and from their parent, and the same
		// forks of the same session are the same.
		var seed [8]byte
		if _, err := io.ReadFull(s.rand, seed[:]); err != nil {
			return nil, fmt.Errorf("sandbox: fork: %w", err)
		}
		c.Seed = binary.LittleEndian.Uint64(seed[:])
	}
	child, err := s.g.prepareSession(&c, fill)
	if err != nil {
		return nil, fmt.Errorf("sandbox: fork: %w", err)
	}
	child.base, child.ckpt = s.base, s.ckpt.clone()
	child.runs, child.sb.fuelUsed, child.slept = s.runs, s.sb.fuelUsed, s.slept
	child.reseed = true
	child.fds = fds
	if err := child.instantiate(ctx, true); err != nil {
		child.sb.Close()
		return nil, fmt.Errorf("sandbox: fork: %w", err)
	}
	return child, nil
}

// SnapshotFile writes a snapshot of s to the file at name, atomically
// (a temporary file renamed into place).
func (s *Session) SnapshotFile(name string) error {
	dir, base := filepath.Split(name)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := s.Snapshot(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}
