package cpython

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/afero"
)

// excludedStdlib are the parts of Lib/ left out of the guest: the test
// suite and what needs a display or a package installer.
var excludedStdlib = map[string]bool{
	"test": true, "idlelib": true, "tkinter": true, "turtledemo": true,
	"turtle.py": true, "ensurepip": true,
}

// stdlibZip is the zip the interpreter imports the standard library from
// (the first entry of its default sys.path under prefix /usr).
const stdlibZip = "lib/python313.zip"

// stdlib compiles the standard library to .pyc with the build Python
// (unchecked-hash invalidation: no timestamps, no source checks), packs the
// .pyc files and data into lib/python313.zip (stored, not deflated, so that
// imports cost no decompression), and writes stdlib.tar holding the zip and
// the compiled zone files under share/zoneinfo. Every entry has the same
// time and mode, in sorted order, so the same inputs give the same bytes.
func (b *builder) stdlib(ctx context.Context) error {
	lib := b.path("stdlib", "python3.13")
	if err := copyTree(b.path(pySrc, "Lib"), lib, func(rel string) bool {
		return excludedStdlib[strings.SplitN(rel, "/", 2)[0]] || strings.Contains(rel, "__pycache__")
	}); err != nil {
		return err
	}
	if err := patchHashlib(lib); err != nil {
		return err
	}
	if err := b.copySysconfig(lib); err != nil {
		return err
	}
	if err := b.run(ctx, b.path("stdlib"), nil, b.path("native", "python"), "-E", "-s", "-m", "compileall",
		"-q", "-f", "-j", "1", "--invalidation-mode", "unchecked-hash", "-d", "/usr/"+stdlibZip, lib); err != nil {
		return err
	}
	zipped, err := zipPyc(lib)
	if err != nil {
		return err
	}
	out, err := os.Create(b.path("stdlib.tar"))
	if err != nil {
		return err
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	for _, d := range []string{"lib/", "share/"} {
		if err := tw.WriteHeader(dirHeader(d)); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(fileHeader(stdlibZip, int64(len(zipped)))); err != nil {
		return err
	}
	if _, err := tw.Write(zipped); err != nil {
		return err
	}
	// The landmarks CPython's getpath looks for under its prefix (else it
	// warns on every start): os.pyc in lib/python3.13, the same bytes as in
	// the zip, and the lib-dynload directory.
	osPyc, err := os.ReadFile(filepath.Join(lib, "__pycache__", "os.cpython-313.pyc"))
	if err != nil {
		return err
	}
	for _, d := range []string{"lib/python3.13/", "lib/python3.13/lib-dynload/"} {
		if err := tw.WriteHeader(dirHeader(d)); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(fileHeader("lib/python3.13/os.pyc", int64(len(osPyc)))); err != nil {
		return err
	}
	if _, err := tw.Write(osPyc); err != nil {
		return err
	}
	if err := tarTree(tw, b.path("tz", "usr", "share", "zoneinfo"), "share/zoneinfo"); err != nil {
		return err
	}
	// Data that packages open as files, which the zip cannot hold
	// (matplotlib's mpl-data, see mplPython).
	if _, err := os.Stat(b.path(shareDir)); err == nil {
		if err := tarTree(tw, b.path(shareDir), "share"); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return out.Close()
}

var epoch = time.Unix(SourceDateEpoch, 0).UTC()

func dirHeader(name string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}
}

func fileHeader(name string, size int64) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: epoch, Format: tar.FormatPAX}
}

// copyTree copies the regular files under src to dst, leaving out those
// skip names (by slash-separated path relative to src).
func copyTree(src, dst string, skip func(rel string) bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		rel = filepath.ToSlash(rel)
		if rel != "." && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(p, target)
	})
}

// walkSorted lists the regular files under root (links followed) as
// slash-separated relative paths, sorted.
func walkSorted(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		fi, err := os.Stat(p) // follows links: zoneinfo has links between zones
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// zipPyc packs the compiled library: pkg/__pycache__/m.cpython-313.pyc
// becomes pkg/m.pyc, stored (imports read it without decompressing); the
// .py sources are deflated beside them, read only when a traceback or
// inspect asks zipimport for a source line (their co_filename is
// /usr/lib/python313.zip/pkg/m.py, from compileall -d); other files are
// kept, stored. The sources add about 2.5 MB to the tar (9.9 MB stored).
func zipPyc(lib string) ([]byte, error) {
	files, err := walkSorted(lib)
	if err != nil {
		return nil, err
	}
	type entry struct{ name, file string }
	var entries []entry
	for _, f := range files {
		dir, base := path.Split(f)
		switch {
		case strings.HasSuffix(dir, "__pycache__/"):
			mod, ok := strings.CutSuffix(base, ".cpython-313.pyc")
			if !ok {
				continue
			}
			entries = append(entries, entry{strings.TrimSuffix(dir, "__pycache__/") + mod + ".pyc", f})
		default:
			entries = append(entries, entry{f, f})
		}
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.name
	}
	for _, d := range namespaceDirs(names) {
		entries = append(entries, entry{name: d + "/"})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		if e.file == "" {
			if _, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store, Modified: epoch}); err != nil {
				return nil, err
			}
			continue
		}
		data, err := os.ReadFile(filepath.Join(lib, filepath.FromSlash(e.file)))
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(e.name, ".py") {
			w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: epoch})
			if err != nil {
				return nil, err
			}
			if _, err := w.Write(data); err != nil {
				return nil, err
			}
			continue
		}
		w, err := zw.CreateRaw(&zip.FileHeader{
			Name: e.name, Method: zip.Store, Modified: epoch,
			CRC32: crc(data), CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data)),
		})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// copySysconfig copies the cross build's sysconfig data into dir. It names
// the work directory, whose name differs from build to build: mapped to
// /build, as the compiler's prefix maps do.
func (b *builder) copySysconfig(dir string) error {
	built, err := filepath.Glob(b.path("cross", "build", "lib.wasi-wasm32-3.13", "*.py"))
	if err != nil || len(built) == 0 {
		return fmt.Errorf("the cross build's sysconfig data (lib.wasi-wasm32-3.13/*.py): %v (%d found)", err, len(built))
	}
	for _, f := range built {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), bytes.ReplaceAll(data, []byte(b.w), []byte("/build")), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// namespaceDirs are the directories of the zip's names that hold Python
// modules somewhere below but no __init__ of their own: namespace
// packages (mpl_toolkits, fontTools.ttLib.tables), which zipimport finds
// only by their directory entry. CPython's own library has none.
func namespaceDirs(names []string) []string {
	dirs := map[string]bool{} // directory -> has an __init__
	for _, name := range names {
		if !strings.HasSuffix(name, ".py") && !strings.HasSuffix(name, ".pyc") {
			continue
		}
		d, base := path.Split(name)
		d = strings.TrimSuffix(d, "/")
		if base == "__init__.py" || base == "__init__.pyc" {
			dirs[d] = true
		}
		for ; d != "" && d != "."; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = false
			}
		}
	}
	var out []string
	for d, init := range dirs {
		if !init {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// tarTree writes the regular files under root (links followed, as copies)
// below prefix, with their directories.
func tarTree(tw *tar.Writer, root, prefix string) error {
	files, err := walkSorted(root)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, f := range files {
		name := prefix + "/" + f
		for d := path.Dir(name); d != "." && !seen[d]; d = path.Dir(d) {
			seen[d] = true
		}
	}
	var ds []string
	for d := range seen {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	for _, d := range ds {
		if d == "share" || d == "lib" {
			continue
		}
		if err := tw.WriteHeader(dirHeader(d + "/")); err != nil {
			return err
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(fileHeader(prefix+"/"+f, int64(len(data)))); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return nil
}

// maxStdlibFile bounds one file of the standard library tar when it is
// read into memory.
const maxStdlibFile = 256 << 20

var (
	stdlibMu  sync.Mutex
	stdlibFSs = map[string]afero.Fs{}
)

// StdlibFS returns the built guest's standard library tree (lib/python313.zip,
// share/zoneinfo) as a read-only in-memory filesystem, to mount at
// StdlibMountPath with ReadOnly set. It is read from the cache once per
// process and the same filesystem is returned to every caller: every
// sandbox shares one copy, and nothing is copied per run. Its files are
// slices of the tar, which is mapped from the cache (pipeline.Store.Map),
// not read.
func StdlibFS(ctx context.Context, opts *Options) (afero.Fs, error) {
	info, d, err := loadInfo(opts)
	if err != nil {
		return nil, err
	}
	stdlibMu.Lock()
	defer stdlibMu.Unlock()
	if fsys, ok := stdlibFSs[info.StdlibSHA256]; ok {
		return fsys, nil
	}
	// Mapped, not read: a run touches a small part of the library, and
	// only those pages are read from the page cache.
	data, err := d.store.Map(info.StdlibSHA256)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	fsys, err := untar(data)
	if err != nil {
		return nil, fmt.Errorf("cpython: standard library: %w", err)
	}
	stdlibFSs[info.StdlibSHA256] = fsys
	return fsys, nil
}

// untar returns the tar in data as a read-only tree whose files are
// slices of data (tarFS), behind afero's read-only wrapper.
func untar(data []byte) (afero.Fs, error) {
	t, err := newTarFS(data)
	if err != nil {
		return nil, err
	}
	return afero.NewReadOnlyFs(t), nil
}

func crc(b []byte) uint32 { return crc32.ChecksumIEEE(b) }
