package sandbox

import (
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/fumehood/fumehood/internal/hostchan"

	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/internal/snapshot"
	"github.com/fumehood/fumehood/wasi"
)

// OpenFileError reports a descriptor the guest holds open that a snapshot,
// fork or hibernation cannot carry, or that a resume or fork cannot open
// again: a file deleted or replaced while open, one that is now missing, or
// something that is not a file of the session's mounts. It matches
// ErrOpenFiles, and Err (sys.ENOENT, ...) when set; Err's text names a
// file deleted while open. The session it came from stays usable.
type OpenFileError struct {
	// FD is the guest's descriptor number.
	FD int32
	// Path is the file's path as the guest sees it ("/tmp/app.log"), or
	// the path it had before it was deleted; empty when unknown.
	Path string
	// Reason says what is wrong, Err why, if known.
	Reason string
	Err    error
}

// Error implements error.
func (e *OpenFileError) Error() string {
	what := fmt.Sprintf("descriptor %d", e.FD)
	if e.Path != "" {
		what += " (" + e.Path + ")"
	}
	msg := "sandbox: " + what + ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrOpenFiles and Err.
func (e *OpenFileError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrOpenFiles}
	}
	return []error{ErrOpenFiles, e.Err}
}

// guestPath is where a descriptor's file is for the guest.
func (s *Session) guestPath(mount int, rel string) string {
	if mount == snapshot.StdlibMount {
		return path.Join(stdlibPath, rel)
	}
	if mount < 0 || mount >= len(s.layout) {
		return rel
	}
	return path.Join(s.layout[mount].Path, rel)
}

// mountFS returns the filesystem of the layout's mount i.
func (s *Session) mountFS(i int) sys.FS {
	switch {
	case i >= 0 && i < len(s.sb.order):
		return s.sb.order[i].fs
	case i == len(s.sb.order) && s.sb.hostFS != nil:
		return s.sb.hostFS
	case i == snapshot.StdlibMount && s.sb.stdlib != nil:
		return s.sb.stdlib
	}
	return nil
}

// describeFiles lists the descriptors in's guest holds open (beyond stdio
// and the preopens), as a snapshot records them. Those that cannot be
// opened again are in lost instead.
func (s *Session) describeFiles(in *instance) (fds []snapshot.Descriptor, lost []*OpenFileError, err error) {
	t, err := descriptorTable(in.mod)
	if err != nil {
		return nil, nil, err
	}
	entries, err := t.list()
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		if e.fd < 3 || e.isPreopen {
			continue
		}
		d, problem := s.describe(e)
		if problem != nil {
			lost = append(lost, problem)
			continue
		}
		fds = append(fds, d)
	}
	return fds, lost, nil
}

// describe describes one descriptor.
func (s *Session) describe(e fdEntry) (snapshot.Descriptor, *OpenFileError) {
	mount, found := 0, false
	for i := range s.layout {
		if fsys := s.mountFS(i); fsys != nil && e.fs == fsys {
			mount, found = i, true
			break
		}
	}
	if !found && s.sb.stdlib != nil && e.fs == s.sb.stdlib {
		// The standard library (a font matplotlib keeps open): the same
		// in every session of the guest build the snapshot names.
		mount, found = snapshot.StdlibMount, true
	}
	fail := func(p, reason string, err error) (snapshot.Descriptor, *OpenFileError) {
		return snapshot.Descriptor{}, &OpenFileError{FD: e.fd, Path: p, Reason: reason, Err: err}
	}
	rel := path.Clean(e.name)
	if rel == "" || rel == "/" {
		rel = "."
	}
	if !found || e.file == nil {
		return fail(e.name, "not a file of the session's mounts (a special file)", nil)
	}
	d := snapshot.Descriptor{FD: e.fd, Mount: mount}
	if wfs, ok := e.fs.(*wasi.FS); ok {
		h, err := wfs.Describe(e.file)
		if err != nil {
			p := ""
			if errors.Is(err, wasi.ErrUnlinked) {
				p = s.guestPath(mount, h.Path)
			}
			return fail(p, "cannot be opened again", err)
		}
		d.Path, d.Dir = h.Path, h.Dir
		d.Read, d.Write, d.Append, d.Nonblock, d.Sync = h.Read, h.Write, h.Append, h.Nonblock, h.Sync
		d.Offset = h.Offset
	} else {
		// The host-call mount: the channel (a connection with nothing in
		// flight between runs) or one of the module's read-only files.
		d.Path, d.Read = rel, true
		d.Write = rel == hostchan.ChannelFile
		d.Dir, _ = e.file.IsDir()
		if !d.Dir && !d.Write {
			if off, errno := e.file.Seek(0, io.SeekCurrent); errno == 0 {
				d.Offset = off
			}
		}
	}
	switch {
	case e.fd >= snapshot.MaxFD:
		return fail(s.guestPath(mount, d.Path), fmt.Sprintf("a descriptor number past %d", snapshot.MaxFD-1), nil)
	case len(d.Path) > snapshot.MaxPath:
		return fail(s.guestPath(mount, d.Path), fmt.Sprintf("a path longer than %d bytes", snapshot.MaxPath), nil)
	}
	return d, nil
}

// carriedFiles returns the descriptors a snapshot, fork or hibernation
// carries, or an error naming one it cannot carry: the live instance's,
// else (hibernating) those it will reopen, if their paths still lead to
// files of the same kind.
func (s *Session) carriedFiles() ([]snapshot.Descriptor, error) {
	var fds []snapshot.Descriptor
	if s.inst != nil {
		var lost []*OpenFileError
		var err error
		if fds, lost, err = s.describeFiles(s.inst); err != nil {
			return nil, err
		}
		if len(lost) > 0 {
			return nil, lost[0]
		}
	} else {
		fds = s.fds
		for _, d := range fds {
			wfs, ok := s.mountFS(d.Mount).(*wasi.FS)
			if !ok {
				continue // the host-call mount's, which do not go away
			}
			st, errno := wfs.Stat(d.Path)
			if errno == 0 && st.Mode.IsDir() != d.Dir {
				errno = sys.ENOTDIR
				if st.Mode.IsDir() {
					errno = sys.EISDIR
				}
			}
			if errno != 0 {
				return nil, &OpenFileError{FD: d.FD, Path: s.guestPath(d.Mount, d.Path), Reason: "cannot be opened again", Err: errno}
			}
		}
	}
	if len(fds) > snapshot.MaxDescriptors {
		return nil, fmt.Errorf("%w: %d descriptors open, at most %d can be carried", ErrOpenFiles, len(fds), snapshot.MaxDescriptors)
	}
	return fds, nil
}

// reopenFiles opens fds again in a new instance, at their numbers and
// offsets, and returns those it opened. When strict (a resume, a fork) the
// first that fails is an *OpenFileError; otherwise (waking from
// hibernation, a rollback) it is left closed, and the guest finds the
// descriptor closed (EBADF).
func (s *Session) reopenFiles(in *instance, fds []snapshot.Descriptor, strict bool) ([]snapshot.Descriptor, error) {
	if len(fds) == 0 {
		return nil, nil
	}
	t, err := descriptorTable(in.mod)
	if err != nil {
		return nil, err
	}
	var kept []snapshot.Descriptor
	for _, d := range fds {
		errno, err := s.reopen(t, d)
		if err != nil {
			return nil, err
		}
		if errno != 0 {
			if strict {
				return nil, &OpenFileError{FD: d.FD, Path: s.guestPath(d.Mount, d.Path), Reason: "cannot be opened again", Err: errno}
			}
			continue
		}
		kept = append(kept, d)
	}
	return kept, nil
}

// reopen opens one descriptor again.
func (s *Session) reopen(t *fdTable, d snapshot.Descriptor) (sys.Errno, error) {
	fsys := s.mountFS(d.Mount)
	if fsys == nil || d.FD < 3 || d.FD >= snapshot.MaxFD {
		return sys.EBADF, nil
	}
	h := wasi.Handle{Path: d.Path, Dir: d.Dir, Read: d.Read, Write: d.Write, Append: d.Append, Nonblock: d.Nonblock, Sync: d.Sync}
	errno, err := t.openAt(d.FD, fsys, d.Path, h.Flags())
	if err != nil || errno != 0 {
		return errno, err
	}
	e, ok, err := t.lookup(d.FD)
	if err != nil {
		return 0, err
	}
	if !ok || e.file == nil {
		return sys.EBADF, nil
	}
	isDir, _ := e.file.IsDir()
	if isDir != d.Dir {
		errno = sys.ENOTDIR
		if isDir {
			errno = sys.EISDIR
		}
	} else if d.Offset > 0 {
		_, errno = e.file.Seek(d.Offset, io.SeekStart)
	}
	if errno != 0 {
		_, _ = t.closeFD(d.FD)
	}
	return errno, nil
}
