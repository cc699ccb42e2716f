package cpython_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/testenv"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/wasi"
)

var withData = &cpython.Options{With: []string{cpython.Data}}

// dataGuest compiles the data variant through the public API, skipping
// the test when it is not built.
func dataGuest(t testing.TB) *sandbox.Guest {
	t.Helper()
	if _, err := cpython.Built(withData); errors.Is(err, cpython.ErrNotBuilt) {
		t.Skipf("the data variant is not built (run `%s --with data` or `make guest-build-data`): %v", cpython.BuildCommand, err)
	}
	return compileVariant(t, withData.With)
}

// compileVariant compiles the built variant with the parts with, closed
// when the test ends.
func compileVariant(t testing.TB, with []string) *sandbox.Guest {
	t.Helper()
	g, err := sandbox.CompilePython(context.Background(), &sandbox.Options{With: with})
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
		// From _start, matplotlib reads its font list from its cache
		// directory, as natively (~/.cache/matplotlib): written once
		// here, from the image, where the font manager is loaded. (Without
		// it, matplotlib would build it, and start a Timer thread, which
		// only the start-up code makes work.)
		env := map[string]string{"HOME": "/tmp", "MPLCONFIGDIR": "/tmp/matplotlib"}
		// (The image's matplotlib computed its cache directory when the
		// image was made: the file goes where $MPLCONFIGDIR says.)
		const fontList = "import os, matplotlib.font_manager as fm\n" +
			"d = os.environ['MPLCONFIGDIR']\nos.makedirs(d, exist_ok=True)\n" +
			"fm.json_dump(fm.fontManager, os.path.join(d, 'fontlist-v%s.json' % fm.FontManager.__version__))"
		benchVsNative(b, g, env, fontList, dataImports, dataBenchProgram, "import", "import-pyplot", "read_csv", "groupby-agg", "chart")
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

// Why tests of matplotlib's suite are left out (mplTestFiles).
const (
	// matplotlib's baseline images are drawn with FreeType 2.6.1 (its
	// tests warn that another version makes "many image comparison
	// failures"); the guest has Debian's FreeType 2.13.3. The failing
	// images were compared: they differ in the glyphs only.
	mplText = "text drawn by FreeType 2.13.3, the baselines by 2.6.1"
	// The kerning table's numbers are FreeType 2.6.1's too: 7 of the 10
	// cases differ (--deselect takes a prefix, so all 10 are left out).
	mplKerning = "FreeType 2.13.3's kerning, the test's numbers are 2.6.1's"
	mplProcess = "starts a subprocess: WASI has no processes"
	mplNetwork = "urlopen: no network policy in this sandbox"
	// Images of 2**23 and 2**24 rows or columns: the last stops at the
	// 2 GiB memory limit (the run ends with StopMemory).
	mplLargeImage = "images of 2**24 rows pass the 2 GiB memory limit"
	mplGigabyte   = "needs gigabytes (matplotlib's note: about 2 GB); past the memory limit Agg's std::bad_alloc is a MemoryError, not the OverflowError tested"
	// The tests run from the source tree, outside the installed package,
	// so the warning is attributed to the test file, which the test
	// counts as matplotlib's (the prefix also leaves out
	// test_warn_external_frame_embedded_python).
	mplLayout = "the tests are not inside the installed package"
	// tzdata 2026f has British Columbia on UTC-7 all year from November
	// 2026; the test expects UTC-8 in the winters up to 2250.
	mplTzdata = "newer tzdata: Canada/Pacific stays on UTC-7"
)

// mplDeselected is a test of matplotlib's suite left out, and why.
type mplDeselected struct{ test, why string }

// mplTestFile is a file of matplotlib's suite, the tests it leaves out
// and the summary pytest must print.
type mplTestFile struct {
	file     string
	deselect []mplDeselected
	want     string
}

// mplTestFiles are the files of matplotlib's own test suite that
// TestMatplotlibTestSuiteSlice runs, each with the tests it leaves out
// (and why) and the summary pytest must print: 1,641 tests pass, 145
// are skipped by matplotlib's own marks, 47 are left out here. Together
// they draw with Agg, compare images, and run the C++ modules: _path,
// _image, ft2font, _tri and _qhull, contourpy, kiwisolver (constrained
// layout).
var mplTestFiles = []mplTestFile{
	{file: "test_path.py", deselect: []mplDeselected{{"test_log_transform_with_zero[png]", mplText}}, want: "92 passed, 5 skipped, 1 deselected"},
	{file: "test_transforms.py", want: "66 passed, 2 skipped"},
	{file: "test_colors.py", deselect: []mplDeselected{
		{"test_cmap_and_norm_from_levels_and_colors[png]", mplText}, {"test_boundarynorm_and_colorbarbase[png]", mplText}}, want: "293 passed, 2 deselected"},
	{file: "test_triangulation.py", deselect: []mplDeselected{{"test_tripcolor[png]", mplText}}, want: "49 passed, 1 deselected"},
	{file: "test_contour.py", deselect: []mplDeselected{{"test_contour_manual_labels[png]", mplText},
		{"test_contour_label_with_disconnected_segments[png]", mplText}, {"test_contour_datetime_axis[png]", mplText}}, want: "74 passed, 3 skipped, 3 deselected"},
	{file: "test_constrainedlayout.py", want: "48 passed"},
	{file: "test_agg.py", deselect: []mplDeselected{{"test_chunksize_fails", mplGigabyte}}, want: "12 passed, 2 skipped, 1 deselected"},
	{file: "test_png.py", deselect: []mplDeselected{{"test_pngsuite[png]", mplText}}, want: "2 passed, 1 deselected"},
	{file: "test_image.py", deselect: []mplDeselected{{"test_load_from_url", mplNetwork}, {"test_image_clip[png]", mplText},
		{"test_image_cliprect[png]", mplText}, {"test_nonuniform_logscale[png]", mplText},
		{"test_large_image", mplLargeImage}}, want: "134 passed, 39 skipped, 8 deselected"},
	{file: "test_ticker.py", deselect: []mplDeselected{{"test_locale_comma", mplProcess}}, want: "533 passed, 1 skipped, 1 deselected"},
	{file: "test_dates.py", deselect: []mplDeselected{{"test_date_axhspan[png]", mplText}, {"test_date_axvspan[png]", mplText},
		{"test_date_axhline[png]", mplText}, {"test_date_axvline[png]", mplText}, {"test_RRuleLocator[png]", mplText},
		{"test_DateFormatter[png]", mplText}, {"test_date_inverted_limit[png]", mplText},
		{"test_auto_date_locator_intmult_tz", mplTzdata}}, want: "82 passed, 8 deselected"},
	{file: "test_ft2font.py", deselect: []mplDeselected{{"test_ft2font_get_kerning", mplKerning}}, want: "41 passed, 18 skipped, 10 deselected"},
	{file: "test_simplification.py", deselect: []mplDeselected{{"test_throw_rendering_complexity_exceeded", mplGigabyte},
		{"test_clipping_with_nans[png]", mplText}}, want: "25 passed, 22 skipped, 2 deselected"},
	{file: "test_lines.py", deselect: []mplDeselected{{"test_lw_scaling[png]", mplText}, {"test_striped_lines[png]", mplText}}, want: "28 passed, 6 skipped, 2 deselected"},
	{file: "test_patches.py", deselect: []mplDeselected{{"test_clip_to_bbox[png]", mplText}, {"test_units_rectangle[png]", mplText},
		{"test_annulus[png]", mplText}, {"test_annulus_setters[png]", mplText}, {"test_annulus_setters2[png]", mplText}}, want: "44 passed, 22 skipped, 5 deselected"},
	{file: "test_backend_svg.py", want: "27 passed, 23 skipped"},
	{file: "test_cbook.py", deselect: []mplDeselected{{"test_warn_external", mplLayout}}, want: "91 passed, 2 skipped, 2 deselected"},
}

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
	tarball := cachedSource(t, cpython.MatplotlibLocalInputs[0].File, "matplotlib's")
	dir := t.TempDir()
	const tests = "matplotlib-3.10.9/lib/matplotlib/tests"
	out, err := exec.Command("tar", "-xf", tarball, "-C", dir, tests).CombinedOutput()
	require.NoError(t, err, "%s", out)
	copySite(t, dist, dir, pytestDeps)
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
			i := slices.IndexFunc(mplTestFiles, func(m mplTestFile) bool { return m.file == f })
			require.GreaterOrEqual(t, i, 0, "%s is not in mplTestFiles", f)
			files = append(files, mplTestFiles[i])
		}
	}
	for _, f := range files {
		t.Run(f.file, func(t *testing.T) {
			args := []string{"--import-mode=importlib", "--rootdir=/pt/" + tests}
			for _, d := range f.deselect {
				args = append(args, "--deselect", f.file+"::"+d.test) // a node ID, relative to the root directory
			}
			// From the image, with the start-up code's threading (a
			// Timer's thread runs at start) and the font list loaded.
			runPytestWith(t, func(prog string) (*sandbox.Result, error) {
				return s.Run(context.Background(), prog, nil)
			}, append(args, "/pt/"+tests+"/"+f.file), f.want)
		})
	}
}
