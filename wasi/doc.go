// Package wasi is the host side of WASI preview 1 that fumehood adds to
// wazero: it gives a WebAssembly guest a writable file system backed by any
// afero.Fs, with mounts, quotas and confinement. It works for any WASI
// module run by wazero, not only fumehood's sandboxes (package sandbox uses
// it for every mount). The backing file system may be an in-memory
// afero.MemMapFs for a scratch space, a RootFs (HostDir, Volume) for a
// persistent host directory, an afero.CopyOnWriteFs for a writable layer
// over read-only content, and so on.
//
// wazero itself mounts only read-only fs.FS trees or host directories. NewFS
// adapts an afero.Fs to wazero's experimental writable interface,
// github.com/tetratelabs/wazero/experimental/sys.FS, adding what a sandbox
// needs on top of the backing file system:
//
//   - Confinement. Every path is resolved by this package, one component at
//     a time, inside the mount root (see Resolve): ".." stops at the root and
//     symbolic links, when the backing file system has them, are expanded
//     here, absolute targets relative to the root, so no path or link can
//     name anything outside the backing file system. As WASI requires, a
//     guest cannot create a link with an absolute target (EPERM); links the
//     host made with one are followed inside the root.
//   - POSIX semantics that afero leaves out or gets wrong for some backends:
//     the errno of every failure (ENOENT, EEXIST, ENOTDIR, EISDIR, ENOTEMPTY,
//     EBADF, EINVAL, ELOOP, ENAMETOOLONG, EROFS, ...), rename over files and
//     empty directories, O_EXCL, O_APPEND, O_TRUNC, O_DIRECTORY, O_NOFOLLOW,
//     stable directory listings so that fd_readdir cookies and rewinds work,
//     inode numbers that are stable per path, and access and modification
//     times set independently where the backend stores only one time.
//   - A read-only mode, in which every mutation fails with EROFS.
//   - A quota (Quota) on the bytes of regular files and on the number of
//     files and directories, checked before any change, so that a write,
//     truncate or create that would exceed it changes nothing and fails with
//     ENOSPC.
//
// # Mounting
//
//	fsys, err := wasi.NewFS(afero.NewMemMapFs(), wasi.Options{
//		Quota: wasi.Quota{MaxBytes: 64 << 20, MaxFiles: 10_000},
//	})
//	if err != nil {
//		return err
//	}
//	fsConfig := wasi.Mount(wazero.NewFSConfig(), fsys, "/")
//	moduleConfig := wazero.NewModuleConfig().WithFSConfig(fsConfig)
//
// Mount more than one FS at different guest paths by calling Mount again on
// the returned config.
//
// # Concurrency and the single-writer assumption
//
// An FS is safe for concurrent use: one mutex serialises its operations and
// those of its files, so that quota checks and the changes they guard are
// atomic. The same FS may be mounted in several module instances at once;
// they then share the files and the quota.
//
// Path resolution checks each component and then uses the resolved path.
// With a backing file system on a real host directory, a component replaced
// by a symbolic link between that check and its use (by another FS over the
// same directory, as two sandboxes sharing a volume, or by another program)
// could redirect the use. RootFs closes that window: it reaches the
// directory only through an os.Root, which never leaves it whatever the
// directory holds at the time of the use, and opens without blocking, the
// FS checking the type of what was opened. afero.BasePathFs over
// afero.OsFs hands whole host paths to the operating system: it is confined
// only while the FS is the only writer of the directory. Use RootFs for
// host directories.
//
// # Host memory
//
// Besides the quota, Options.MaxOpen bounds the handles open at once and
// Options.MaxListingBytes the directory listings they hold (see FS.ListingBytes).
//
// # Open handles across restarts
//
// FS.Describe tells what it takes to open a handle again (its path, which
// follows renames made through the FS, its access, flags and offset), and
// FS.Reopen opens it so, in the same FS or another over the same content,
// never creating or truncating. A handle whose file was deleted or
// replaced while open is ErrUnlinked: no path leads to it. Sessions use
// them to carry the files a guest holds open across snapshots and forks.
package wasi
