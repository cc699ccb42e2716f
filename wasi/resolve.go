package wasi

import (
	"io/fs"
	"path"
	"strings"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero/experimental/sys"
)

// Limits applied while resolving a path, the same as Linux's.
const (
	// MaxSymlinks is how many symbolic links one resolution may follow before
	// it fails with ELOOP.
	MaxSymlinks = 40
	// MaxNameLen is the longest path component, in bytes (ENAMETOOLONG).
	MaxNameLen = 255
	// MaxPathLen is the longest path, or symbolic link target, in bytes
	// (ENAMETOOLONG).
	MaxPathLen = 4096
)

// Resolve maps name, a path inside the mount, to the path in fsys that it
// names, following every symbolic link, the final component's too.
//
// Resolution never leaves the root of fsys: name is relative to the root
// whether or not it starts with "/"; ".." at the root stays at the root;
// each component is checked with Lstat (afero.Lstater) and every symbolic
// link is read (afero.LinkReader) and expanded by this function, never by
// the backing file system. A relative link target is taken relative to the
// link's directory and an absolute one relative to the root, like Linux's
// openat2 with RESOLVE_IN_ROOT. More than MaxSymlinks links fail with ELOOP.
//
// The result is a clean, absolute, slash-separated path ("/" for the root)
// in which no component is a symbolic link, except the last one for
// ResolveNoFollow. The final component need not exist (the result is then
// where a create would put it), but every component before it must be an
// existing directory.
//
// Errors are sys.Errno values: ENOENT (a missing directory on the way),
// ENOTDIR (a component used as a directory is not one, or name ends in "/"
// and names a non-directory), ELOOP, ENAMETOOLONG (a component longer than
// MaxNameLen or a path or link target longer than MaxPathLen), EINVAL (a NUL
// byte), ENOSYS (a symbolic link in an fs that cannot read links) or the
// backing file system's own errors.
//
// When fsys is an *afero.BasePathFs, absolute link targets that start with
// its base directory are first made relative to it (see NewFS). A RootFs
// does the same itself (see RootFs).
func Resolve(fsys afero.Fs, name string) (string, error) {
	r, errno := newResolver(fsys).resolve(name, true)
	if errno != 0 {
		return "", errno
	}
	return r.path, nil
}

// ResolveNoFollow is Resolve, except that a symbolic link in the final
// component is not followed (unless name ends in "/"): the result then names
// the link itself, as lstat, unlink, rename and readlink need.
func ResolveNoFollow(fsys afero.Fs, name string) (string, error) {
	r, errno := newResolver(fsys).resolve(name, false)
	if errno != 0 {
		return "", errno
	}
	return r.path, nil
}

// resolver reads the backing file system's metadata for path resolution.
type resolver struct {
	fsys    afero.Fs
	lstater afero.Lstater    // nil: Stat is used, and no links are seen
	reader  afero.LinkReader // nil: links cannot be followed (ENOSYS)
	// hostBase is the real directory of an *afero.BasePathFs (not "/"), for
	// translating link targets between its host form and the mount's view.
	hostBase string
}

func newResolver(fsys afero.Fs) *resolver {
	r := &resolver{fsys: fsys}
	r.lstater, _ = fsys.(afero.Lstater)
	r.reader, _ = fsys.(afero.LinkReader)
	if bp, ok := fsys.(*afero.BasePathFs); ok {
		if base, err := bp.RealPath("/"); err == nil && base != "/" && strings.HasPrefix(base, "/") {
			r.hostBase = base
		}
	}
	return r
}

// lstat stats p without following a final symbolic link, when the backing
// file system can.
func (r *resolver) lstat(p string) (fs.FileInfo, sys.Errno) {
	if r.lstater != nil {
		fi, _, err := r.lstater.LstatIfPossible(p)
		return fi, toErrno(err)
	}
	fi, err := r.fsys.Stat(p)
	return fi, toErrno(err)
}

// readlink returns the target of the symbolic link p, as the guest sees it.
func (r *resolver) readlink(p string) (string, sys.Errno) {
	if r.reader == nil {
		return "", sys.ENOSYS
	}
	target, err := r.reader.ReadlinkIfPossible(p)
	if err != nil {
		return "", toErrno(err)
	}
	if r.hostBase != "" {
		// afero.BasePathFs stores targets as host paths (see toHostTarget).
		if target == r.hostBase {
			target = "/"
		} else if strings.HasPrefix(target, r.hostBase+"/") {
			target = target[len(r.hostBase):]
		}
	}
	return target, 0
}

// toHostTarget returns the target to hand to the backing file system to
// create a link at linkPath that points at target. afero.BasePathFs joins
// every target, relative ones too, to its base directory, so a relative
// target is first made absolute (in the mount) from the link's directory;
// readlink then returns that absolute form.
func (r *resolver) toHostTarget(linkPath, target string) string {
	if r.hostBase == "" {
		return target
	}
	if !strings.HasPrefix(target, "/") {
		target = path.Join(path.Dir(linkPath), target)
	}
	return path.Clean(target)
}

// resolved is the outcome of resolving a path.
type resolved struct {
	// path is the clean absolute path in the backing file system.
	path string
	// fi describes path (Lstat), or is nil when the final component does not
	// exist.
	fi fs.FileInfo
	// dirSlash is true when the name ended in "/", so it must be a directory.
	dirSlash bool
}

// exists reports whether the resolved path exists.
func (r resolved) exists() bool { return r.fi != nil }

// isDir reports whether the resolved path is an existing directory.
func (r resolved) isDir() bool { return r.fi != nil && r.fi.IsDir() }

// isSymlink reports whether the resolved path is a symbolic link.
func (r resolved) isSymlink() bool { return r.fi != nil && r.fi.Mode()&fs.ModeSymlink != 0 }

// resolve implements Resolve (follow) and ResolveNoFollow (!follow).
func (r *resolver) resolve(name string, follow bool) (resolved, sys.Errno) {
	if strings.IndexByte(name, 0) >= 0 {
		return resolved{}, sys.EINVAL
	}
	if len(name) > MaxPathLen {
		return resolved{}, sys.ENAMETOOLONG
	}
	trimmed := strings.TrimRight(name, "/")
	dirSlash := trimmed != name && trimmed != ""
	if dirSlash {
		follow = true // "link/" names what the link points to
	}

	// pending is a stack of components still to walk: the next is last.
	pending := pushComponents(make([]string, 0, 16), trimmed)
	// cur is the resolved path so far ("" for the root), cuts the length of
	// cur before each of its components, for "..".
	cur := ""
	cuts := make([]int, 0, 16)
	links := 0
	var fi fs.FileInfo // describes cur; nil when it must be looked up

	for len(pending) > 0 {
		c := pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		switch c {
		case "", ".":
			continue
		case "..":
			if n := len(cuts); n > 0 {
				cur = cur[:cuts[n-1]]
				cuts = cuts[:n-1]
			}
			fi = nil
			continue
		}
		if len(c) > MaxNameLen {
			return resolved{}, sys.ENAMETOOLONG
		}
		// final is true when c is the last component. Anything still pending
		// (even "." or a trailing "/" of a link target) needs c to be a
		// directory.
		final := len(pending) == 0
		p := cur + "/" + c
		if len(p) > MaxPathLen {
			return resolved{}, sys.ENAMETOOLONG
		}
		info, errno := r.lstat(p)
		if errno != 0 {
			if errno == sys.ENOENT && final {
				if dirSlash {
					// Only mkdir accepts a missing "name/"; callers check.
					return resolved{path: p, dirSlash: true}, 0
				}
				return resolved{path: p}, 0
			}
			return resolved{}, errno
		}
		if info.Mode()&fs.ModeSymlink != 0 && (!final || follow) {
			links++
			if links > MaxSymlinks {
				return resolved{}, sys.ELOOP
			}
			target, errno := r.readlink(p)
			if errno != 0 {
				return resolved{}, errno
			}
			if target == "" {
				return resolved{}, sys.ENOENT
			}
			if len(target) > MaxPathLen || strings.IndexByte(target, 0) >= 0 {
				return resolved{}, sys.ENAMETOOLONG
			}
			if target[0] == '/' {
				cur, cuts = "", cuts[:0]
			}
			pending = pushComponents(pending, target)
			fi = nil
			continue
		}
		if !final && !info.IsDir() {
			return resolved{}, sys.ENOTDIR
		}
		cuts = append(cuts, len(cur))
		cur = p
		fi = info
	}

	if cur == "" {
		cur = "/"
	}
	if fi == nil { // the root, or a path that ended in "." or ".."
		info, errno := r.lstat(cur)
		if errno != 0 {
			return resolved{}, errno
		}
		fi = info
	}
	if dirSlash && !fi.IsDir() {
		return resolved{}, sys.ENOTDIR
	}
	return resolved{path: cur, fi: fi, dirSlash: dirSlash}, 0
}

// pushComponents pushes the slash-separated components of p onto the stack
// so that the first component is on top. Empty components are kept: one
// after a component means that component must be a directory.
func pushComponents(stack []string, p string) []string {
	start := len(stack)
	for {
		i := strings.IndexByte(p, '/')
		if i < 0 {
			stack = append(stack, p)
			break
		}
		stack = append(stack, p[:i])
		p = p[i+1:]
	}
	// reverse the pushed part so the first component is on top
	for i, j := start, len(stack)-1; i < j; i, j = i+1, j-1 {
		stack[i], stack[j] = stack[j], stack[i]
	}
	return stack
}
