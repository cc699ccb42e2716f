package cpython_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/cache"
	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// built skips the test when the guest is not in the default cache (fails
// it with $FUMEHOOD_REQUIRE_GUEST set).
func built(t *testing.T) cpython.Info {
	t.Helper()
	sandboxtest.Built(t)
	info, err := cpython.Built(nil)
	require.NoError(t, err)
	return info
}

// modulesProgram imports the modules whose C parts the build adds and uses
// each once.
const modulesProgram = `
import sys, zlib, bz2, lzma, sqlite3, decimal, pyexpat, zoneinfo, datetime, json
data = b"fumehood " * 1000
assert zlib.decompress(zlib.compress(data)) == data
assert bz2.decompress(bz2.compress(data)) == data
assert lzma.decompress(lzma.compress(data)) == data
db = sqlite3.connect(":memory:")
db.execute("create table t (x)")
db.executemany("insert into t values (?)", [(i,) for i in range(10)])
assert db.execute("select sum(x) from t").fetchone()[0] == 45
assert str(decimal.Decimal(1) / decimal.Decimal(7))[:8] == "0.142857"
assert decimal.Decimal is not None and type(decimal.Context()).__module__ == "decimal"
p = pyexpat.ParserCreate()
seen = []
p.StartElementHandler = lambda name, attrs: seen.append(name)
p.Parse("<a><b/></a>", True)
assert seen == ["a", "b"]
paris = zoneinfo.ZoneInfo("Europe/Paris")
summer = datetime.datetime(2025, 7, 1, 12, tzinfo=paris)
assert summer.utcoffset() == datetime.timedelta(hours=2), summer.utcoffset()
print(sys.version)
print(json.dumps(sorted(m for m in ("_decimal", "zlib", "_bz2", "_lzma", "_sqlite3", "pyexpat") if m in sys.builtin_module_names)))
`

// TestBuiltGuestRunsModules runs the built guest through sandbox.Compile
// (which applies the errno shim and fuel metering, the same functions as
// cpython.Steps) and Exec, with the standard library mounted read-only, and
// checks that the modules the build adds work and that it is 3.13.5.
func TestBuiltGuestRunsModules(t *testing.T) {
	info := built(t)
	ctx := context.Background()
	wasm, _, err := cpython.LoadUnprepared(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, info.WasmSHA256, pipeline.Digest(wasm))

	g, err := sandbox.Compile(ctx, wasm, nil)
	require.NoError(t, err)
	defer g.Close()
	lib, err := cpython.StdlibFS(ctx, nil)
	require.NoError(t, err)
	again, err := cpython.StdlibFS(ctx, nil)
	require.NoError(t, err)
	assert.Same(t, lib, again, "one copy of the standard library per process")

	s, err := g.NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{
		{Path: cpython.StdlibMountPath, FS: lib, ReadOnly: true},
	}, Limits: sandbox.Limits{Timeout: 2 * time.Minute}})
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Exec(ctx, nil, "-c", modulesProgram)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	require.Equal(t, 0, res.ExitCode, "stderr: %s", res.Stderr)
	assert.Contains(t, string(res.Stdout), "3.13.5 ")
	assert.Contains(t, string(res.Stdout), `["_bz2", "_decimal", "_lzma", "_sqlite3", "pyexpat", "zlib"]`)

	// The mount is read-only: the guest cannot change the shared copy.
	res, err = s.Exec(ctx, nil, "-c", "open('/usr/lib/python313.zip', 'wb')")
	var exit *sandbox.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 1, res.ExitCode)
	assert.Contains(t, string(res.Stderr), "OSError")
	st, err := lib.Stat("/lib/python313.zip")
	require.NoError(t, err)
	assert.Positive(t, st.Size())
	_, err = afero.ReadFile(lib, "/share/zoneinfo/Europe/Paris")
	assert.NoError(t, err)
}

// TestBuiltDigestsMatch checks that the digests the manifest records are
// those of the stored artifacts, and that the prepared interpreter is what
// cpython.Steps make of the built one.
func TestBuiltDigestsMatch(t *testing.T) {
	info := built(t)
	ctx := context.Background()
	wasm, _, err := cpython.LoadUnprepared(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, info.WasmSHA256, pipeline.Digest(wasm))
	assert.EqualValues(t, info.WasmSize, len(wasm))
	prepared, _, err := cpython.Load(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, info.PreparedSHA256, pipeline.Digest(prepared))
	assert.Equal(t, cpython.Key(), info.Key, "the manifest is the current recipe's")
}

// TestBuildReproducible builds the guest again from the same inputs in a
// fresh cache directory and checks that both artifacts have the digests of
// the cached build. It takes as long as a build (several minutes on 2
// cores), so it runs only with FUMEHOOD_TEST_REBUILD=1.
func TestBuildReproducible(t *testing.T) {
	if os.Getenv("FUMEHOOD_TEST_REBUILD") == "" || testing.Short() {
		t.Skip("set FUMEHOOD_TEST_REBUILD=1 to build the guest a second time and compare digests")
	}
	info := built(t)
	dir := t.TempDir()
	// Reuse the downloaded inputs (Build checks them again), not the build.
	cache, err := cache.Dir("")
	require.NoError(t, err)
	for _, in := range cpython.Inputs {
		b, err := os.ReadFile(filepath.Join(cache, "cpython", "sources", in.File))
		if err == nil {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "cpython", "sources"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "cpython", "sources", in.File), b, 0o644))
		}
	}
	again, err := cpython.Build(context.Background(), &cpython.Options{CacheDir: dir})
	require.NoError(t, err)
	assert.Equal(t, info.WasmSHA256, again.WasmSHA256, "python.wasm")
	assert.Equal(t, info.StdlibSHA256, again.StdlibSHA256, "standard library")
	assert.Equal(t, info.PreparedSHA256, again.PreparedSHA256, "prepared")
}

// TestExportImportBuiltGuest exports the built guest to one file, imports
// it into a fresh cache directory, and checks that the same guest is then
// built there: the same digests, the interpreter prepared alike.
func TestExportImportBuiltGuest(t *testing.T) {
	info := built(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "guest.tar")
	_, err := cpython.ExportFile(ctx, file, nil)
	require.NoError(t, err)
	dir := t.TempDir()
	got, err := cpython.ImportFile(ctx, file, &cpython.Options{CacheDir: dir})
	require.NoError(t, err)
	again, err := cpython.Built(&cpython.Options{CacheDir: dir})
	require.NoError(t, err)
	assert.Equal(t, got, again)
	assert.Equal(t, info.WasmSHA256, again.WasmSHA256)
	assert.Equal(t, info.StdlibSHA256, again.StdlibSHA256)
	assert.Equal(t, info.PreparedSHA256, again.PreparedSHA256)
}
