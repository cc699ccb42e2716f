package cpython

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/pipeline"
)

// fakeWasm is a small valid module: one exported function, enough for the
// preparation steps (errno shim, fuel) to work on.
var fakeWasm = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
	0x03, 0x02, 0x01, 0x00, // function 0 of type 0
	0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, // export _start
	0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code: empty body
}

// fakeStdlib is a standard library tar of one file.
func fakeStdlib(t testing.TB) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(dirHeader("lib/")))
	data := []byte("not really a zip")
	require.NoError(t, tw.WriteHeader(fileHeader(stdlibZip, int64(len(data)))))
	_, err := tw.Write(data)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// fakeExport writes an export of fake artifacts with a manifest of the
// current key, changed by edit if not nil.
func fakeExport(t testing.TB, edit func(*Info)) []byte {
	stdlib := fakeStdlib(t)
	info := Info{
		Recipe: Recipe, Python: PythonVersion, Key: Key(), Inputs: Inputs, Flags: crossFlags("$W"),
		Toolchain:  "test",
		WasmSHA256: pipeline.Digest(fakeWasm), WasmSize: int64(len(fakeWasm)),
		StdlibSHA256: pipeline.Digest(stdlib), StdlibSize: int64(len(stdlib)),
	}
	if edit != nil {
		edit(&info)
	}
	return writeExport(t, info, fakeWasm, stdlib)
}

func writeExport(t testing.TB, info Info, wasm, stdlib []byte) []byte {
	d := t.TempDir()
	opts := &Options{CacheDir: d}
	dd, err := opts.dirs()
	require.NoError(t, err)
	_, err = dd.store.Put(wasm)
	require.NoError(t, err)
	_, err = dd.store.Put(stdlib)
	require.NoError(t, err)
	info.PreparedSHA256, err = dd.store.Put(wasm) // Export does not read it
	require.NoError(t, err)
	require.NoError(t, writeAtomic(dd.manifest, mustJSON(t, info)))
	var buf bytes.Buffer
	_, err = Export(context.Background(), &buf, opts)
	require.NoError(t, err)
	return buf.Bytes()
}

func mustJSON(t testing.TB, info Info) []byte {
	b, err := json.Marshal(info)
	require.NoError(t, err)
	return b
}

// cacheEmpty checks that an import stored nothing in the cache dir.
func cacheEmpty(t *testing.T, dir string) {
	t.Helper()
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	assert.Empty(t, files, "nothing is cached")
}

// TestImportRoundTrip imports an export, checks that the guest is then
// built in that cache (prepared by the import), and exports it again.
func TestImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	file := fakeExport(t, nil)
	dir := t.TempDir()
	opts := &Options{CacheDir: dir}
	_, err := Built(opts)
	require.ErrorIs(t, err, ErrNotBuilt)

	info, err := Import(ctx, bytes.NewReader(file), opts)
	require.NoError(t, err)
	got, err := Built(opts)
	require.NoError(t, err)
	assert.Equal(t, info, got)
	assert.Equal(t, pipeline.Digest(fakeWasm), got.WasmSHA256)
	assert.NotEqual(t, got.WasmSHA256, got.PreparedSHA256, "the import prepared the interpreter itself")
	assert.Equal(t, stepIDs(Steps), got.PreparedSteps)
	prepared, _, err := Load(ctx, opts)
	require.NoError(t, err)
	assert.Equal(t, got.PreparedSHA256, pipeline.Digest(prepared))
	lib, err := StdlibFS(ctx, opts)
	require.NoError(t, err)
	_, err = lib.Stat("/" + stdlibZip)
	assert.NoError(t, err)

	var again bytes.Buffer
	_, err = Export(ctx, &again, opts)
	require.NoError(t, err)
	x, err := readExport(bytes.NewReader(again.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, fakeWasm, x.wasm)
	assert.Equal(t, got, x.info)
}

// TestImportRejectsTampered flips one byte of each part of an export: each
// is refused as a bad export, and nothing is cached.
func TestImportRejectsTampered(t *testing.T) {
	file := fakeExport(t, nil)
	for _, part := range [][]byte{fakeWasm, fakeStdlib(t)} {
		i := bytes.Index(file, part)
		require.Positive(t, i)
		bad := bytes.Clone(file)
		bad[i+len(part)-1] ^= 0x40
		dir := t.TempDir()
		_, err := Import(context.Background(), bytes.NewReader(bad), &Options{CacheDir: dir})
		require.ErrorIs(t, err, ErrBadExport)
		assert.Contains(t, err.Error(), "the manifest says")
		cacheEmpty(t, dir)
	}
}

// TestImportRejectsTruncated cuts an export at many lengths: each is a bad
// export, and nothing is cached.
func TestImportRejectsTruncated(t *testing.T) {
	file := fakeExport(t, nil)
	dir := t.TempDir()
	for n := 0; n < len(file)-1024; n += 97 { // the last 1024 bytes are the tar's end
		_, err := Import(context.Background(), bytes.NewReader(file[:n]), &Options{CacheDir: dir})
		require.ErrorIs(t, err, ErrBadExport, "cut at %d", n)
	}
	cacheEmpty(t, dir)
}

// TestImportRejectsOtherBuild refuses an export whose manifest names other
// inputs or another key, with consistent digests.
func TestImportRejectsOtherBuild(t *testing.T) {
	for name, edit := range map[string]func(*Info){
		"key":    func(i *Info) { i.Key = pipeline.Digest([]byte("other")) },
		"recipe": func(i *Info) { i.Recipe++ },
		"inputs": func(i *Info) { i.Inputs = append([]Input(nil), Inputs[1:]...) },
		"flags":  func(i *Info) { i.Flags = append([]string{"-O0"}, i.Flags...) },
	} {
		dir := t.TempDir()
		_, err := Import(context.Background(), bytes.NewReader(fakeExport(t, edit)), &Options{CacheDir: dir})
		require.ErrorIs(t, err, ErrExportKey, name)
		cacheEmpty(t, dir)
	}
}

// TestImportRejectsOtherEntries refuses a tar with an extra entry and one
// with its entries in another order.
func TestImportRejectsOtherEntries(t *testing.T) {
	file := fakeExport(t, nil)
	x, err := readExport(bytes.NewReader(file))
	require.NoError(t, err)

	var extra bytes.Buffer
	tw := tar.NewWriter(&extra)
	for _, e := range []struct {
		name string
		data []byte
	}{{exportManifest, mustJSON(t, x.info)}, {exportWasm, x.wasm}, {exportStdlib, x.stdlib}, {"fumehood-guest/more", []byte("x")}} {
		require.NoError(t, tw.WriteHeader(fileHeader(e.name, int64(len(e.data)))))
		_, err := tw.Write(e.data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	_, err = readExport(bytes.NewReader(extra.Bytes()))
	require.ErrorIs(t, err, ErrBadExport)
	assert.Contains(t, err.Error(), "unexpected entry")

	var swapped bytes.Buffer
	tw = tar.NewWriter(&swapped)
	require.NoError(t, tw.WriteHeader(fileHeader(exportWasm, int64(len(x.wasm)))))
	_, err = tw.Write(x.wasm)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	_, err = readExport(bytes.NewReader(swapped.Bytes()))
	require.ErrorIs(t, err, ErrBadExport)

	_, err = readExport(bytes.NewReader([]byte("not a tar at all, just some bytes")))
	require.ErrorIs(t, err, ErrBadExport)
}

// FuzzReadExport feeds the export parser arbitrary bytes: it never panics,
// and whatever it accepts has the digests its manifest names.
func FuzzReadExport(f *testing.F) {
	file := fakeExport(f, nil)
	f.Add(file)
	f.Add(file[:len(file)/2])
	f.Add(file[:600])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := readExport(bytes.NewReader(b))
		if err != nil {
			require.ErrorIs(t, err, ErrBadExport)
			return
		}
		assert.Equal(t, x.info.WasmSHA256, pipeline.Digest(x.wasm))
		assert.Equal(t, x.info.StdlibSHA256, pipeline.Digest(x.stdlib))
	})
}
