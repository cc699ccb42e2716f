package wasi

import (
	"errors"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/spf13/afero"
	"github.com/spf13/afero/mem"
	"github.com/tetratelabs/wazero/experimental/sys"
)

// ENOSPC is the errno returned when a write, truncate or create would exceed
// the FS quota (Quota.MaxBytes or Quota.MaxFiles), and when the backing file
// system itself reports ENOSPC or EDQUOT.
//
// wazero v1.12's sys.Errno has no ENOSPC, so this is a value outside the
// range wazero defines (its Error method prints "Errno(4147)"). Go callers of
// the sys.FS can compare against it. At the wasip1 boundary wazero maps any
// errno it does not know to ERRNO_IO, so by itself a guest sees EIO ("I/O
// error") for a quota failure. Options.ReportErrno lets a host whose guest
// carries fumehood's errno shim deliver ENOSPC instead (the sandbox does).
const ENOSPC sys.Errno = 4096 + 51 // 51 is ENOSPC in wasip1's errno numbering

// EMFILE is the errno returned when a guest would hold more than
// Options.MaxOpen handles open in one FS. Like ENOSPC it is outside the
// range wazero defines, and a guest sees EIO unless the host passes it on
// (Options.ReportErrno).
const EMFILE sys.Errno = 4096 + 33 // 33 is EMFILE in wasip1's errno numbering

// ENOMEM is the errno returned when a directory listing would take the
// listings held by open handles past Options.MaxListingBytes. Like ENOSPC it
// is outside the range wazero defines, and a guest sees EIO unless the host
// passes it on (Options.ReportErrno).
const ENOMEM sys.Errno = 4096 + 48 // 48 is ENOMEM in wasip1's errno numbering

// toErrno maps an error returned by an afero.Fs or afero.File to the closest
// sys.Errno. Unknown errors become EIO.
func toErrno(err error) sys.Errno {
	if err == nil {
		return 0
	}
	var errno sys.Errno
	if errors.As(err, &errno) {
		return errno
	}
	if errors.Is(err, afero.ErrNoSymlink) || errors.Is(err, afero.ErrNoReadlink) {
		return sys.ENOSYS
	}
	if isPathEscape(err) {
		// os.Root refused a path that left its directory: only a
		// concurrent change of the directory gets here (see RootFs).
		return sys.EPERM
	}
	var se syscall.Errno
	if errors.As(err, &se) {
		switch se {
		case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG:
			return ENOSPC
		}
		return sys.UnwrapOSError(se)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return sys.ENOENT
	case errors.Is(err, fs.ErrExist):
		return sys.EEXIST
	case errors.Is(err, fs.ErrPermission):
		return sys.EPERM
	case errors.Is(err, fs.ErrClosed), errors.Is(err, afero.ErrFileClosed), errors.Is(err, mem.ErrFileClosed):
		return sys.EBADF
	case errors.Is(err, fs.ErrInvalid), errors.Is(err, afero.ErrOutOfRange), errors.Is(err, mem.ErrOutOfRange):
		return sys.EINVAL
	case errors.Is(err, afero.ErrTooLarge), errors.Is(err, mem.ErrTooLarge):
		return ENOSPC
	}
	return sys.EIO
}

// isPathEscape reports whether err is os.Root's refusal of a path that
// leads out of its directory, by the identity of os's error value.
func isPathEscape(err error) bool {
	escapes := errPathEscapes()
	if escapes == nil {
		return false
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Err == escapes {
		return true
	}
	var le *os.LinkError
	return errors.As(err, &le) && le.Err == escapes
}

// errPathEscapes is the error os.Root wraps in its refusal of a path that
// leads out of its directory ("path escapes from parent"), which os does
// not export: learned once, from a root asked for "..", so that refusals
// are matched by the value, not its text. nil if no directory could be
// opened as a root.
var errPathEscapes = sync.OnceValue(func() error {
	for _, dir := range []string{os.TempDir(), "/"} {
		r, err := os.OpenRoot(dir)
		if err != nil {
			continue
		}
		_, err = r.Lstat("..")
		r.Close()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
	}
	return nil
})
