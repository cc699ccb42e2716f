package cpython

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/fumehood/fumehood/internal/pipeline"
)

// An export is one file holding a built guest, for building it once (in CI,
// in a container image) and shipping it: a tar of exactly three entries, in
// this order, each with the sizes and SHA-256 digests the manifest names:
//
//	fumehood-guest/manifest.json   the build's Info
//	fumehood-guest/python.wasm     the interpreter (Info.WasmSHA256)
//	fumehood-guest/stdlib.tar      the standard library (Info.StdlibSHA256)
//
// Import checks every digest before it stores anything, and prepares the
// interpreter itself (Steps: errno shim, fuel metering) rather than
// trusting a prepared binary from the file.
const (
	exportManifest = "fumehood-guest/manifest.json"
	exportWasm     = "fumehood-guest/python.wasm"
	exportStdlib   = "fumehood-guest/stdlib.tar"
)

// Bounds of what Import reads from a file.
const (
	maxExportManifest = 1 << 20
	maxExportWasm     = 256 << 20
	maxExportStdlib   = 1 << 30
)

// ErrBadExport reports a file that is not an intact export of a built
// guest: truncated, tampered with (a digest or size does not match), or not
// an export at all. Nothing is stored.
var ErrBadExport = errors.New("cpython: not an intact guest export")

// ErrExportKey reports an export of a guest built from other inputs, flags
// or recipe than this version of fumehood builds (its Key differs).
var ErrExportKey = errors.New("cpython: the export is of another build")

// Export writes the built guest to w as one file (see Import). The guest
// must be built: else the error matches ErrNotBuilt.
func Export(ctx context.Context, w io.Writer, opts *Options) (Info, error) {
	info, d, err := loadInfo(opts)
	if err != nil {
		return Info{}, err
	}
	wasm, err := d.store.Get(info.WasmSHA256)
	if err != nil {
		return Info{}, fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	stdlib, err := d.store.Get(info.StdlibSHA256)
	if err != nil {
		return Info{}, fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	manifest, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return Info{}, fmt.Errorf("cpython: %w", err)
	}
	tw := tar.NewWriter(w)
	for _, e := range []struct {
		name string
		data []byte
	}{{exportManifest, manifest}, {exportWasm, wasm}, {exportStdlib, stdlib}} {
		if err := ctx.Err(); err != nil {
			return Info{}, err
		}
		if err := tw.WriteHeader(fileHeader(e.name, int64(len(e.data)))); err != nil {
			return Info{}, fmt.Errorf("cpython: export: %w", err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return Info{}, fmt.Errorf("cpython: export: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return Info{}, fmt.Errorf("cpython: export: %w", err)
	}
	return info, nil
}

// ExportFile writes the built guest to the file path, through a temporary
// file and a rename: an interrupted export leaves no partial file.
func ExportFile(ctx context.Context, path string, opts *Options) (Info, error) {
	var buf bytes.Buffer
	info, err := Export(ctx, &buf, opts)
	if err != nil {
		return Info{}, err
	}
	return info, writeAtomic(path, buf.Bytes())
}

// exported is what a verified export holds.
type exported struct {
	info   Info
	wasm   []byte
	stdlib []byte
}

// readExport reads and verifies an export: exactly the three entries, in
// order, within bounds, with the sizes and digests of the manifest.
func readExport(r io.Reader) (exported, error) {
	var x exported
	tr := tar.NewReader(r)
	next := func(name string, max int64) ([]byte, error) {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s is missing", ErrBadExport, name)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: reading %s: %w", ErrBadExport, name, err)
		}
		if h.Name != name || h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%w: entry %q where %s was expected", ErrBadExport, h.Name, name)
		}
		for k := range h.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				// A sparse entry's holes are bytes the file does not hold.
				return nil, fmt.Errorf("%w: %s is a sparse file", ErrBadExport, name)
			}
		}
		if h.Size < 0 || h.Size > max {
			return nil, fmt.Errorf("%w: %s is %d bytes (at most %d)", ErrBadExport, name, h.Size, max)
		}
		// Read as the bytes arrive, not by the header's size: a short file
		// claiming a large entry costs only what it holds.
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, tr); err != nil {
			return nil, fmt.Errorf("%w: %s is truncated: %w", ErrBadExport, name, err)
		}
		if int64(buf.Len()) != h.Size {
			return nil, fmt.Errorf("%w: %s is truncated", ErrBadExport, name)
		}
		return buf.Bytes(), nil
	}
	m, err := next(exportManifest, maxExportManifest)
	if err != nil {
		return x, err
	}
	if err := json.Unmarshal(m, &x.info); err != nil {
		return x, fmt.Errorf("%w: %s: %w", ErrBadExport, exportManifest, err)
	}
	if x.wasm, err = next(exportWasm, maxExportWasm); err != nil {
		return x, err
	}
	if x.stdlib, err = next(exportStdlib, maxExportStdlib); err != nil {
		return x, err
	}
	if h, err := tr.Next(); !errors.Is(err, io.EOF) {
		if err != nil {
			return x, fmt.Errorf("%w: after %s: %w", ErrBadExport, exportStdlib, err)
		}
		return x, fmt.Errorf("%w: unexpected entry %q", ErrBadExport, h.Name)
	}
	for _, c := range []struct {
		name, want string
		size       int64
		data       []byte
	}{{exportWasm, x.info.WasmSHA256, x.info.WasmSize, x.wasm}, {exportStdlib, x.info.StdlibSHA256, x.info.StdlibSize, x.stdlib}} {
		if got := pipeline.Digest(c.data); got != c.want || int64(len(c.data)) != c.size {
			return x, fmt.Errorf("%w: %s has sha256:%s and %d bytes, the manifest says sha256:%s and %d bytes",
				ErrBadExport, c.name, got, len(c.data), c.want, c.size)
		}
	}
	return x, nil
}

// Import reads an export (see Export) from r, verifies it, and stores it in
// the cache as if it had been built here: the interpreter and standard
// library by digest, the interpreter prepared by Steps here, then
// the manifest. A truncated or tampered file returns an error matching
// ErrBadExport, an export of another build one matching ErrExportKey; in
// either case nothing is stored.
func Import(ctx context.Context, r io.Reader, opts *Options) (Info, error) {
	if opts == nil {
		opts = &Options{}
	}
	d, err := opts.dirs()
	if err != nil {
		return Info{}, err
	}
	x, err := readExport(r)
	if err != nil {
		return Info{}, err
	}
	info := x.info
	if info.Key != Key() || info.Recipe != Recipe || info.Python != PythonVersion ||
		!reflect.DeepEqual(info.Inputs, Inputs) || !slices.Equal(info.Flags, crossFlags("$W")) {
		return Info{}, fmt.Errorf("%w: key %.12s (recipe %d, CPython %s); this fumehood builds key %.12s (recipe %d, CPython %s)",
			ErrExportKey, info.Key, info.Recipe, info.Python, Key(), Recipe, PythonVersion)
	}
	if err := d.saveGuest(ctx, opts, &info, x.wasm, x.stdlib, time.Time{}); err != nil {
		return Info{}, err
	}
	return info, nil
}

// ImportFile imports the export in the file path (see Import); errors name
// the file.
func ImportFile(ctx context.Context, path string, opts *Options) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, fmt.Errorf("cpython: import: %w", err)
	}
	defer f.Close()
	info, err := Import(ctx, f, opts)
	if err != nil {
		return Info{}, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}
