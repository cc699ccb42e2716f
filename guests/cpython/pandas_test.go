package cpython_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/runtool"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/wasi"
)

var withPandas = &cpython.Options{With: []string{cpython.Pandas}}

// builtPandas skips the test when the pandas variant is not in the
// default cache.
func builtPandas(t testing.TB) cpython.Info {
	t.Helper()
	info, err := cpython.Built(withPandas)
	if errors.Is(err, cpython.ErrNotBuilt) {
		t.Skipf("the pandas variant is not built (run `%s --with pandas` or `make guest-build-pandas`): %v", cpython.BuildCommand, err)
	}
	require.NoError(t, err)
	return info
}

// pandasGuest compiles the pandas variant through the public API.
func pandasGuest(t testing.TB) *sandbox.Guest {
	t.Helper()
	builtPandas(t)
	g, err := sandbox.CompilePython(context.Background(), &sandbox.Options{With: []string{cpython.Pandas}})
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	return g
}

// pandasProgram is what an agent does with pandas: read a CSV, group,
// merge, pivot, time zones (zoneinfo's, pytz's and dateutil's, all on
// the guest's zone files), write CSV and JSON and read them back.
const pandasProgram = `
import io, json, sys
import numpy as np
import pandas as pd
assert pd.__version__ == "2.2.3", pd.__version__
with open("/tmp/weather.csv", "w") as f:
    f.write("city,day,temp,rain\nOslo,2024-01-01,-3.5,1.2\nOslo,2024-01-02,-1.0,0.0\n"
            "Rome,2024-01-01,12.5,0.0\nRome,2024-01-02,14.0,3.1\nLima,2024-01-01,22.0,0.0\n")
df = pd.read_csv("/tmp/weather.csv", parse_dates=["day"])
assert df.shape == (5, 4) and str(df["day"].dtype) == "datetime64[ns]", df.dtypes
g = df.groupby("city").agg(temp=("temp", "mean"), rain=("rain", "sum"), n=("temp", "size"))
assert list(g.index) == ["Lima", "Oslo", "Rome"]
assert g.loc["Rome", "temp"] == 13.25 and g.loc["Oslo", "n"] == 2 and abs(g.loc["Rome", "rain"] - 3.1) < 1e-12
countries = pd.DataFrame({"city": ["Oslo", "Rome", "Lima"], "country": ["NO", "IT", "PE"]})
m = df.merge(countries, on="city", how="left")
assert list(m["country"]) == ["NO", "NO", "IT", "IT", "PE"]
p = df.pivot_table(index="city", columns="day", values="temp", aggfunc="mean")
assert p.shape == (3, 2) and p.loc["Oslo"].iloc[1] == -1.0 and np.isnan(p.loc["Lima"].iloc[1])
idx = pd.date_range("2024-03-30 00:00", periods=4, freq="12h", tz="Europe/Oslo")
s = pd.Series(range(4), index=idx)
assert str(s.index.tz) == "Europe/Oslo"
assert s.tz_convert("UTC").index[0] == pd.Timestamp("2024-03-29 23:00", tz="UTC")
assert [t.utcoffset().total_seconds() for t in s.index] == [3600, 3600, 3600, 7200], "summer time from 31 March"
assert list(s.resample("D").sum()) == [1, 5]
import dateutil.tz, pytz
assert pd.Timestamp("2024-07-01 12:00", tz=pytz.timezone("America/New_York")).utcoffset().total_seconds() == -4 * 3600
assert pd.Timestamp("2024-01-01 12:00", tz=dateutil.tz.gettz("Asia/Tokyo")).tz_convert("UTC").hour == 3
assert g.to_csv().splitlines()[0] == "city,temp,rain,n"
df.to_csv("/tmp/out.csv", index=False)
back = pd.read_csv("/tmp/out.csv", parse_dates=["day"])
pd.testing.assert_frame_equal(back, df)
assert json.loads(g.to_json(orient="index"))["Rome"]["temp"] == 13.25
records = df.to_json(orient="records", date_format="iso")
assert json.loads(records)[0]["day"].startswith("2024-01-01T00:00:00"), records
assert pd.read_json(io.StringIO(records), orient="records").shape == (5, 4)
assert "pandas._libs.lib" in sys.builtin_module_names
print("pandas ok", pd.__version__)
`

// TestPandasGuest runs pandasProgram in the pandas variant: in a one-shot
// run from the pre-initialized image (pandas imported in it), from
// _start (pandas imported by the run), and checks the variant's manifest.
func TestPandasGuest(t *testing.T) {
	info := builtPandas(t)
	assert.Equal(t, []string{cpython.Numpy, cpython.Pandas}, info.With)
	assert.Contains(t, info.Builtins, "pandas._libs.window.aggregations")
	assert.Contains(t, info.Builtins, "numpy._core._multiarray_umath")
	ctx := context.Background()
	// Modules linked statically share one symbol space (pandas' tokenizer
	// is compiled into four of them): wasm-ld replaces a call whose type
	// differs from the callee's with a stub that traps.
	wasm, _, err := cpython.LoadUnprepared(ctx, withPandas)
	require.NoError(t, err)
	if i := bytes.Index(wasm, []byte("signature_mismatch:")); i >= 0 {
		t.Errorf("python.wasm has a signature-mismatch stub: %q", wasm[i:min(i+60, len(wasm))])
	}
	g := pandasGuest(t)
	assert.Equal(t, []string{cpython.Numpy, cpython.Pandas}, g.Python().With)
	res, err := g.Run(ctx, pandasProgram, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "pandas ok 2.2.3\n", string(res.Stdout))
	res, err = g.Run(ctx, "import pandas", nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Less(t, res.FuelUsed, int64(100_000_000), "pandas' import is in the image")
	res, err = g.Exec(ctx, nil, "-c", pandasProgram)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "pandas ok 2.2.3\n", string(res.Stdout))
	t.Logf("from _start: fuel %.3g, peak memory %d", float64(res.FuelUsed), res.PeakMemory)
}

// TestPandasSession: a DataFrame lives across a session's runs, and
// forks and snapshots carry it.
func TestPandasSession(t *testing.T) {
	ctx := context.Background()
	g := pandasGuest(t)
	s, err := g.NewSession(ctx, nil)
	require.NoError(t, err)
	defer s.Close()
	run := func(s *sandbox.Session, code string) string {
		t.Helper()
		res, err := s.Run(ctx, code, nil)
		require.NoError(t, err, "stderr: %s", res.Stderr)
		return res.Value
	}
	run(s, `import numpy as np, pandas as pd
rng = np.random.default_rng(0)
df = pd.DataFrame({"k": rng.integers(0, 50, 10000), "v": rng.random(10000),
                   "t": pd.date_range("2024-01-01", periods=10000, freq="h", tz="America/Chicago")})`)
	const q = `round(float(df.groupby("k")["v"].sum().max()), 9), str(df["t"].dt.tz), len(df)`
	want := run(s, q)
	assert.Contains(t, want, "'America/Chicago', 10000)")

	f, err := s.Fork(ctx)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, want, run(f, q), "the fork has the DataFrame")
	run(f, `df["v"] = 0.0`)
	assert.Equal(t, want, run(s, q), "the fork's change is its own")

	var snap bytes.Buffer
	require.NoError(t, s.Snapshot(&snap))
	r, err := g.ResumeSession(ctx, &snap, nil)
	require.NoError(t, err)
	defer r.Close()
	assert.Equal(t, want, run(r, q), "the snapshot has the DataFrame")
	assert.Equal(t, "'2024-01-01 06:00:00+00:00'", run(r, `str(df["t"].dt.tz_convert("UTC").iloc[0])`))
	// A stopped run rolls back, the DataFrame included.
	res, err := r.Run(ctx, "df['v'] = 1.0\nwhile True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 50_000_000}})
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted, "stderr: %s", res.Stderr)
	assert.Equal(t, want, run(r, q))
}

// pandasMergeSetup builds two frames of a million rows whose merge takes
// seconds in the guest.
const pandasMergeSetup = `import numpy as np, pandas as pd
n = 1_000_000
a = pd.DataFrame({"k": np.arange(n) % 700_001, "x": np.arange(n)})
b = pd.DataFrame({"k": np.arange(n)[::-1] % 900_001, "y": np.arange(n)})
`

// TestPandasBounds: pandas' C code is bounded like any guest code. A
// DataFrame past the memory limit is a MemoryError and the run is marked
// as having hit the limit; a merge stops on fuel, and on the deadline
// with fuel unlimited; the sandbox runs pandas normally afterwards.
func TestPandasBounds(t *testing.T) {
	s, err := pandasGuest(t).NewSandbox(&sandbox.Config{Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: 5 * time.Minute}})
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()

	res, err := s.Run(ctx, `import pandas as pd, numpy as np
df = pd.DataFrame(np.zeros((1000, 10)))
big = pd.concat([df] * 10_000, ignore_index=True)  # 800 MB: past the 512 MiB limit
print(big.shape)`, nil)
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit, "stderr: %s", res.Stderr)
	assert.True(t, res.MemoryLimitHit)
	assert.Contains(t, string(res.Stderr), "MemoryError")
	assert.Empty(t, res.Stdout)

	res, err = s.Run(ctx, pandasMergeSetup, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	setup := res.FuelUsed
	start := time.Now()
	res, err = s.Run(ctx, pandasMergeSetup+"m = a.merge(b, on='k')\nprint(len(m))", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: setup + 300_000_000}})
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted, "stderr: %s", res.Stderr)
	assert.Empty(t, res.Stdout)
	t.Logf("merge stopped on fuel after %v (setup %.3g fuel)", time.Since(start), float64(setup))

	start = time.Now()
	res, err = s.Run(ctx, pandasMergeSetup+"for _ in range(1000):\n    m = a.merge(b, on='k', how='outer')\nprint(len(m))",
		&sandbox.RunOptions{Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: 3 * time.Second}})
	require.ErrorIs(t, err, context.DeadlineExceeded, "stderr: %s", res.Stderr)
	assert.Empty(t, res.Stdout)
	t.Logf("merges stopped on the deadline after %v", time.Since(start))

	res, err = s.Run(ctx, "import pandas as pd\nprint(pd.DataFrame({'a': [1, 2, 3]})['a'].sum())", nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "6\n", string(res.Stdout), "the sandbox is usable after the limits stopped runs")
}

// pandasTestFiles are the files of pandas' own test suite that
// TestPandasTestSuiteSlice runs, each with the summary pytest must print.
// Tests are left out by pandas' own markers (pandasTestMarkers), not by
// name: in these files, test_pivot's
// test_pivot_number_of_levels_larger_than_int32 (slow: it builds a table
// past 2**31 cells), test_pandas' network and S3 tests (test_url,
// test_read_s3_jsonl, test_to_s3: network and single_cpu; there is no
// network in the sandbox, and no boto/s3fs) and test_common_basic's
// pyarrow engine cases (single_cpu: no pyarrow in the guest).
var pandasTestFiles = []struct {
	file string
	want string
}{
	{file: "pandas/tests/reshape/merge/test_merge.py", want: "910 passed, 14 skipped"},
	{file: "pandas/tests/reshape/test_pivot.py", want: "172 passed, 1 deselected, 2 xfailed"},
	{file: "pandas/tests/io/formats/test_to_csv.py", want: "85 passed, 8 skipped"},
	{file: "pandas/tests/io/json/test_pandas.py", want: "401 passed, 44 skipped, 5 deselected, 28 xfailed"},
	{file: "pandas/tests/tslibs/test_timezones.py", want: "488 passed"},
	{file: "pandas/tests/indexes/datetimes/test_timezones.py", want: "40 passed"},
	// pandas._libs.window.aggregations: the one C++ module.
	{file: "pandas/tests/window/test_rolling.py", want: "888 passed"},
	{file: "pandas/tests/io/parser/common/test_common_basic.py", want: "201 passed, 1 skipped, 67 deselected"},
	{file: "pandas/tests/groupby/aggregate/test_aggregate.py", want: "415 passed, 3 xfailed"},
}

// pandasTestMarkers selects by pandas' markers: no slow tests, none that
// need the network, a database or a machine of their own (pandas marks
// its pyarrow and S3 tests single_cpu).
const pandasTestMarkers = "not slow and not network and not db and not single_cpu"

// TestPandasTestSuiteSlice runs files of pandas' own test suite
// (pandasTestFiles) in the pandas variant under Debian's pytest and
// hypothesis (pandas' conftest imports it), mounted read-only from the
// host, one run per file. pandas' tests are taken from its source
// tarball in the cache, and they import pandas from there: its Python
// files are the guest's, and its extension modules the guest's built-ins,
// which the import system finds before any path. Runs start from _start,
// without the image's pandas.
func TestPandasTestSuiteSlice(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pandas test files in the guest (minutes)")
	}
	builtPandas(t)
	const dist = "/usr/lib/python3/dist-packages"
	for _, d := range []string{"_pytest", "hypothesis"} {
		if _, err := os.Stat(filepath.Join(dist, d)); err != nil {
			t.Skip("Debian's python3-pytest and python3-hypothesis are not installed: apt-get install python3-pytest python3-hypothesis")
		}
	}
	tarball := cachedSource(t, cpython.PandasInputs[0].File, "pandas'")
	dir := t.TempDir()
	out, err := exec.Command("tar", "-xf", tarball, "-C", dir, "pandas-2.2.3/pandas", "pandas-2.2.3/pyproject.toml", "pandas-2.2.3/meson.build").CombinedOutput()
	require.NoError(t, err, "%s", out)
	// The tests import pandas from this tree (pytest puts its root first
	// on the path): with the build's edits its Python files are the
	// guest's, its extension modules are the guest's built-ins, and its
	// version is the one the build writes. pandas asks for pytest 7.3.2;
	// Debian bookworm's is 7.2.1.
	root := filepath.Join(dir, "pandas-2.2.3")
	require.NoError(t, cpython.ApplyPandasEdits(root))
	require.NoError(t, os.WriteFile(filepath.Join(root, "pandas", "_version_meson.py"),
		[]byte("__version__=\"2.2.3\"\n__git_version__=\"\"\n"), 0o644))
	pyproject, err := os.ReadFile(filepath.Join(root, "pyproject.toml"))
	require.NoError(t, err)
	require.Equal(t, 1, bytes.Count(pyproject, []byte(`minversion = "7.3.2"`)))
	require.NoError(t, os.WriteFile(filepath.Join(root, "pyproject.toml"), bytes.Replace(pyproject, []byte(`minversion = "7.3.2"`), []byte(`minversion = "7.2"`), 1), 0o644))
	copySite(t, dist, dir, append(slices.Clone(pytestDeps), pandasTestDeps...))
	host, err := wasi.HostDir(dir)
	require.NoError(t, err)
	s, err := pandasGuest(t).NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{{Path: "/pt", FS: host, ReadOnly: true}},
		Env:    map[string]string{"USER": "sandbox", "HOME": "/tmp"},
		Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: 15 * time.Minute, Memory: 1 << 30}})
	require.NoError(t, err)
	defer s.Close()
	for _, f := range pandasTestFiles {
		t.Run(strings.TrimPrefix(f.file, "pandas/tests/"), func(t *testing.T) {
			runPytest(t, s, []string{"--rootdir=/pt/pandas-2.2.3", "-c", "/pt/pandas-2.2.3/pyproject.toml", "-o", "addopts=",
				"-m", pandasTestMarkers, "/pt/pandas-2.2.3/" + f.file}, f.want)
		})
	}
}

// pandasTestDeps are what pandas' tests import beyond pytest: hypothesis
// (pandas' conftest) with its dependency sortedcontainers.
var pandasTestDeps = []string{"hypothesis", "sortedcontainers", "exceptiongroup"}

// pandasBenchSetup imports pandas (timed) and writes a CSV of 100,000
// rows: the start of pandasBenchProgram and dataBenchProgram.
const pandasBenchSetup = `
import json, os, statistics, tempfile, time
out = {}
t0 = time.perf_counter()
import pandas as pd
out["import"] = (time.perf_counter() - t0) * 1e3
import numpy as np
rng = np.random.default_rng(0)
n = 100_000
src = pd.DataFrame({"id": np.arange(n), "key": rng.integers(0, 100, n),
                    "cat": np.array(["north", "south", "east", "west"])[rng.integers(0, 4, n)],
                    "x": rng.random(n), "y": rng.standard_normal(n),
                    "when": pd.date_range("2024-01-01", periods=n, freq="min").astype(str)})
path = os.path.join(tempfile.gettempdir(), "fh-bench-%d.csv" % os.getpid())
src.to_csv(path, index=False)
def median_ms(f, n=5):
    ts = []
    for _ in range(n):
        s = time.perf_counter(); f(); ts.append(time.perf_counter() - s)
    return statistics.median(ts) * 1e3
`

// pandasBenchProgram times, inside the interpreter, import pandas (numpy
// included), read_csv of 100,000 rows and a groupby().agg() on them, the
// last two the median of 5; the same program runs natively. It prints
// its times in ms as JSON, with pandas' version.
const pandasBenchProgram = pandasBenchSetup + `
out["read_csv"] = median_ms(lambda: pd.read_csv(path))
df = pd.read_csv(path)
out["groupby-agg"] = median_ms(lambda: df.groupby(["key", "cat"]).agg({"x": ["mean", "sum"], "y": "max", "id": "count"}))
os.remove(path)
r = df.groupby(["key", "cat"]).agg({"x": ["mean", "sum"], "y": "max", "id": "count"})
assert df.shape == (n, 6) and len(r) == 400, (df.shape, len(r))
out["version"] = pd.__version__
print(json.dumps(out))
`

// BenchmarkPandas runs pandasBenchProgram in the pandas variant from
// _start (so that import pandas is timed) and natively with Debian's
// python3-pandas (/usr/bin/python3), alternating, in one run, and
// reports the medians and the ratios sandbox/native:
//
//	go test ./guests/cpython -run '^$' -bench 'BenchmarkPandas$' -benchtime 1x
func BenchmarkPandas(b *testing.B) {
	benchVsNative(b, pandasGuest(b), nil, "", "import pandas", pandasBenchProgram, "import", "read_csv", "groupby-agg")
}

// benchVsNative runs program (which prints its times in ms as a JSON
// object, with a "version") 7 times in guest g from _start and 7 times
// natively (/usr/bin/python3, or $FUMEHOOD_NATIVE_PYTHON), alternating,
// and reports for each of names the medians and the ratio
// sandbox/native. It also times a run of imports in a one-shot run from
// g's image, where they are done already (image-run-import-ms). The
// sandbox has environment env, and runs setup (from the image) once
// before.
func benchVsNative(b *testing.B, g *sandbox.Guest, env map[string]string, setup, imports, program string, names ...string) {
	native := os.Getenv("FUMEHOOD_NATIVE_PYTHON")
	if native == "" {
		native = "/usr/bin/python3"
	}
	if out, err := exec.Command(native, "-c", imports).CombinedOutput(); err != nil {
		b.Skipf("no native %q (%s; see the Makefile's bench-data target): %v %s", imports, native, err, out)
	}
	ctx := context.Background()
	s, err := g.NewSandbox(&sandbox.Config{Env: env, Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: 5 * time.Minute, Memory: 1 << 30}})
	require.NoError(b, err)
	defer s.Close()
	if setup != "" {
		res, err := s.Run(ctx, setup, nil)
		require.NoError(b, err, "stderr: %s", res.Stderr)
	}
	parse := func(out []byte) map[string]any {
		var t map[string]any
		require.NoError(b, json.Unmarshal(bytes.TrimSpace(out), &t), "%s", out)
		for _, n := range names {
			require.IsType(b, float64(0), t[n], "%s in %s", n, out)
		}
		return t
	}
	const runs = 7
	for b.Loop() {
		var guest, host []map[string]any
		var image []float64
		for range runs {
			res, err := s.Exec(ctx, nil, "-c", program)
			require.NoError(b, err, "stderr: %s", res.Stderr)
			guest = append(guest, parse(res.Stdout))
			out, err := exec.Command(native, "-c", program).Output()
			require.NoError(b, err)
			host = append(host, parse(out))
			t0 := time.Now()
			res, err = g.Run(ctx, imports, nil)
			require.NoError(b, err, "stderr: %s", res.Stderr)
			image = append(image, float64(time.Since(t0).Microseconds())/1e3)
		}
		med := func(ts []map[string]any, name string) float64 {
			v := make([]float64, len(ts))
			for i, t := range ts {
				v[i] = t[name].(float64)
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		for _, n := range names {
			gm, nm := med(guest, n), med(host, n)
			b.ReportMetric(gm, n+"-guest-ms")
			b.ReportMetric(nm, n+"-native-ms")
			b.ReportMetric(gm/nm, n+"-ratio")
		}
		slices.Sort(image)
		b.ReportMetric(image[len(image)/2], "image-run-import-ms")
		b.Logf("guest %v, native %v, %d runs each", guest[0]["version"], host[0]["version"], runs)
	}
}

// TestPandasVariantDescribed: the code tool's probe finds the variant's
// packages with their versions, and its instructions name them.
func TestPandasVariantDescribed(t *testing.T) {
	py := pandasGuest(t)
	info, err := runtool.Probe(context.Background(), py)
	require.NoError(t, err)
	assert.Equal(t, []string{"numpy " + cpython.NumpyVersion, "pandas " + cpython.PandasVersion}, info.Packages)
	assert.Contains(t, runtool.InstructionsFor(info, nil, nil), "numpy "+cpython.NumpyVersion+" and pandas "+cpython.PandasVersion)
}
