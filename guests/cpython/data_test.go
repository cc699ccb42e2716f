package cpython_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/cache"
	"github.com/fumehood/fumehood/internal/testenv"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/wasi"
)

var withData = &cpython.Options{With: []string{cpython.Data}}

// dataGuest compiles the data variant through the public API, skipping
// the test when it is not built.
func dataGuest(t testing.TB) *sandbox.Guest {
	t.Helper()
	_, err := cpython.Built(withData)
	if errors.Is(err, cpython.ErrNotBuilt) {
		t.Skipf("the data variant is not built (run `%s --with data` or `make guest-build-data`): %v", cpython.BuildCommand, err)
	}
	require.NoError(t, err)
	g, err := sandbox.CompilePython(context.Background(), &sandbox.Options{With: []string{cpython.Data}})
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	return g
}

// dataImports are what an agent's data code imports first.
const dataImports = "import numpy as np, pandas as pd, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt"

// dataBenchProgram is pandasBenchProgram's work and a 1,000-point line
// chart saved as PNG (the median of 5), with import matplotlib.pyplot
// timed after pandas.
const dataBenchProgram = pandasBenchSetup + `
t0 = time.perf_counter()
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out["import-pyplot"] = (time.perf_counter() - t0) * 1e3
out["read_csv"] = median_ms(lambda: pd.read_csv(path))
df = pd.read_csv(path)
out["groupby-agg"] = median_ms(lambda: df.groupby(["key", "cat"]).agg({"x": ["mean", "sum"], "y": "max", "id": "count"}))
os.remove(path)
png = os.path.join(tempfile.gettempdir(), "fh-bench-%d.png" % os.getpid())
ys = np.cumsum(rng.standard_normal(1000))
def chart():
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(ys)
    ax.set_title("1,000 points")
    fig.savefig(png)
    plt.close(fig)
out["chart"] = median_ms(chart)
assert os.path.getsize(png) > 10_000
os.remove(png)
out["version"] = "pandas %s, matplotlib %s" % (pd.__version__, matplotlib.__version__)
print(json.dumps(out))
`

// BenchmarkData runs dataBenchProgram in the data variant from _start
// and natively with Debian's python3-pandas and python3-matplotlib,
// alternating, in one run: the four numbers as ratios
// sandbox/native. It also reports the start of a run with everything
// imported (a one-shot run from the image and a new session's first
// run), a run in a live session and its snapshot's size, against the
// default guest's:
//
//	go test ./guests/cpython -run '^$' -bench 'BenchmarkData$' -benchtime 1x
func BenchmarkData(b *testing.B) {
	g := dataGuest(b)
	b.Run("vs-native", func(b *testing.B) {
		benchVsNative(b, g, dataImports, dataBenchProgram, "import", "import-pyplot", "read_csv", "groupby-agg", "chart")
	})
	b.Run("start", func(b *testing.B) {
		base, err := sandbox.CompilePython(context.Background(), nil)
		require.NoError(b, err)
		defer base.Close()
		ctx := context.Background()
		for b.Loop() {
			for _, c := range []struct {
				name string
				g    *sandbox.Guest
				code string
			}{{"default", base, "print(1)"}, {"data", g, dataImports + "\nprint(1)"}} {
				oneshot := testenv.Median(21, func() {
					res, err := c.g.Run(ctx, c.code, nil)
					require.NoError(b, err, "stderr: %s", res.Stderr)
				})
				session := testenv.Median(21, func() {
					s, err := c.g.NewSession(ctx, nil)
					require.NoError(b, err)
					_, err = s.Run(ctx, c.code, nil)
					require.NoError(b, err)
					s.Close()
				})
				// A run in a live session that does not touch the
				// data stack, and the size of its snapshot.
				s, err := c.g.NewSession(ctx, nil)
				require.NoError(b, err)
				_, err = s.Run(ctx, "x = 0", nil)
				require.NoError(b, err)
				run := testenv.Median(21, func() {
					_, err := s.Run(ctx, "x += 1", nil)
					require.NoError(b, err)
				})
				var snap bytes.Buffer
				require.NoError(b, s.Snapshot(&snap))
				s.Close()
				b.ReportMetric(float64(oneshot)/1e6, c.name+"-oneshot-ms")
				b.ReportMetric(float64(session)/1e6, c.name+"-new-session+run-ms")
				b.ReportMetric(float64(run)/1e6, c.name+"-session-run-ms")
				b.ReportMetric(float64(snap.Len())/1e6, c.name+"-snapshot-MB")
			}
		}
	})
}

// mplTestFiles are the files of matplotlib's own test suite that
// TestMatplotlibTestSuiteSlice runs, each with the tests it leaves out
// (and why) and the summary pytest must print.
var mplTestFiles = []struct {
	file     string
	deselect []string
	want     string
}{}

// TestMatplotlibTestSuiteSlice runs files of matplotlib's own test suite
// (mplTestFiles), image comparisons included, in the data variant under
// Debian's pytest, mounted read-only from the host, one run per file. The
// tests and their baseline images come from matplotlib's source tarball
// in the cache; matplotlib itself (matplotlib.testing included) is the
// guest's. Result images are written to the run's working directory, in
// memory.
func TestMatplotlibTestSuiteSlice(t *testing.T) {
	if testing.Short() {
		t.Skip("runs matplotlib test files in the guest (minutes)")
	}
	g := dataGuest(t)
	const dist = "/usr/lib/python3/dist-packages"
	if _, err := os.Stat(filepath.Join(dist, "_pytest")); err != nil {
		t.Skip("Debian's python3-pytest is not installed: apt-get install python3-pytest")
	}
	cache, err := cache.Dir("")
	require.NoError(t, err)
	tarball := filepath.Join(cache, "cpython", "sources", cpython.MatplotlibLocalInputs[0].File)
	if _, err := os.Stat(tarball); err != nil {
		t.Skipf("matplotlib's source tarball is not in the cache: %v", err)
	}
	dir := t.TempDir()
	const tests = "matplotlib-3.10.9/lib/matplotlib/tests"
	out, err := exec.Command("tar", "-xf", tarball, "-C", dir, tests).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "site"), 0o755))
	for _, d := range pytestDeps {
		if _, err := os.Stat(filepath.Join(dist, d)); err == nil {
			out, err := exec.Command("cp", "-r", filepath.Join(dist, d), filepath.Join(dir, "site")).CombinedOutput()
			require.NoError(t, err, "%s", out)
		}
	}
	host, err := wasi.HostDir(dir)
	require.NoError(t, err)
	s, err := g.NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{{Path: "/pt", FS: host, ReadOnly: true}},
		Env:    map[string]string{"USER": "sandbox", "HOME": "/tmp"},
		Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: 15 * time.Minute, Memory: 2 << 30}})
	require.NoError(t, err)
	defer s.Close()
	files := mplTestFiles
	if only := os.Getenv("FUMEHOOD_MPL_TESTS"); only != "" {
		files = nil
		for _, f := range strings.Split(only, ",") {
			files = append(files, struct {
				file     string
				deselect []string
				want     string
			}{file: f, want: "passed"})
		}
	}
	for _, f := range files {
		t.Run(f.file, func(t *testing.T) {
			args := []string{"--import-mode=importlib", "--rootdir=/pt/" + tests}
			for _, d := range f.deselect {
				name, _, _ := strings.Cut(d, ":")
				args = append(args, "--deselect", "/pt/"+tests+"/"+f.file+"::"+strings.TrimSpace(name))
			}
			// From the image, with the start-up code's threading (a
			// Timer's thread runs at start) and the font list loaded.
			runPytestWith(t, func(prog string) (*sandbox.Result, error) {
				return s.Run(context.Background(), prog, nil)
			}, append(args, "/pt/"+tests+"/"+f.file), f.want)
		})
	}
}
