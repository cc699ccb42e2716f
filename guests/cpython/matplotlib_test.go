package cpython_test

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/sandbox"
)

var withMatplotlib = &cpython.Options{With: []string{cpython.Matplotlib}}

// mplGuest compiles a variant with matplotlib through the public API: the
// matplotlib variant, or the data variant where only that one is built
// (it is a superset), skipping the test when neither is.
func mplGuest(t testing.TB) *sandbox.Guest {
	t.Helper()
	with := []string{cpython.Matplotlib}
	_, err := cpython.Built(withMatplotlib)
	if errors.Is(err, cpython.ErrNotBuilt) {
		if _, derr := cpython.Built(withData); derr == nil {
			with, err = withData.With, nil
		}
	}
	if errors.Is(err, cpython.ErrNotBuilt) {
		t.Skipf("the matplotlib variant is not built (run `%s --with matplotlib` or `make guest-build-matplotlib`): %v", cpython.BuildCommand, err)
	}
	require.NoError(t, err)
	return compileVariant(t, with)
}

// mplProgram draws a 1,000-point line chart, a contour plot (contourpy), a
// triangulation (Qhull) and text (FreeType, the DejaVu fonts), and saves it
// as PNG (through Pillow) and SVG.
const mplProgram = `
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
assert matplotlib.__version__ == "3.10.9", matplotlib.__version__
fig, axs = plt.subplots(1, 3, figsize=(9, 3), dpi=100)
axs[0].plot(range(1000))
axs[0].set_title("line: ünïcode")
x, y = np.meshgrid(np.linspace(-2, 2, 40), np.linspace(-2, 2, 40))
axs[1].contourf(x, y, np.exp(-x**2 - y**2), levels=8)
pts = np.random.default_rng(0).random((30, 2))
import matplotlib.tri as mtri
axs[2].triplot(mtri.Triangulation(pts[:, 0], pts[:, 1]))
fig.tight_layout()
fig.savefig("/tmp/c.png")
fig.savefig("/tmp/c.svg")
plt.close(fig)
from PIL import Image
im = Image.open("/tmp/c.png")
assert im.size == (900, 300), im.size
svg = open("/tmp/c.svg").read()
assert svg.startswith("<?xml") and "</svg>" in svg
print("matplotlib ok", im.size)
`

// TestMatplotlibGuest runs mplProgram in the matplotlib variant, in a
// one-shot run from the image (pyplot imported in it). Not from _start
// (Exec): without fumehood's start-up code, which runs a thread's target
// at start, matplotlib cannot build its font list (the font manager
// starts a threading.Timer), and without $HOME it has no configuration
// directory.
func TestMatplotlibGuest(t *testing.T) {
	ctx := context.Background()
	g := mplGuest(t)
	assert.Subset(t, g.Python().With, []string{cpython.Matplotlib, cpython.Numpy})
	res, err := g.Run(ctx, mplProgram, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "matplotlib ok (900, 300)\n", string(res.Stdout))
	assert.Empty(t, string(res.Stderr))
	t.Logf("from the image: fuel %.3g, peak memory %d", float64(res.FuelUsed), res.PeakMemory)
}

// mplJPEGProgram saves a chart as JPEG, round-trips images through
// Pillow's JPEG codec (baseline and progressive), and decodes a stream
// whose Huffman table is bogus 50 times: libjpeg's error exit leaves
// libjpeg's frames by Pillow's longjmp, which must come back as an
// OSError each time.
const mplJPEGProgram = `
import io
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from PIL import Image, features
print("jpg", features.check("jpg"), features.version("jpg"), features.version("libjpeg_turbo"))
fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
ax.plot([0, 1, 4, 9])
fig.savefig("/tmp/c.jpg", pil_kwargs={"quality": 90})
plt.close(fig)
data = open("/tmp/c.jpg", "rb").read()
im = Image.open("/tmp/c.jpg")
im.load()
print(data[:3] == b"\xff\xd8\xff", im.format, im.size, im.mode)
src = Image.linear_gradient("L").resize((64, 64))
for opts in ({"quality": 95}, {"quality": 95, "progressive": True}):
    buf = io.BytesIO()
    src.save(buf, "JPEG", **opts)
    back = Image.open(io.BytesIO(buf.getvalue()))
    back.load()
    diff = max(abs(a - b) for a, b in zip(src.getdata(), back.getdata()))
    print(back.format, back.size, back.mode, back.info.get("progressive", 0), diff <= 8)
good = bytearray(buf.getvalue())
at = good.index(b"\xff\xc4")
bad = bytes(good[:at + 5] + b"\xff" * 16 + good[at + 21:])
errors = 0
for i in range(50):
    try:
        Image.open(io.BytesIO(bad)).load()
    except OSError:
        errors += 1
print("errors", errors)
`

// TestMatplotlibJPEG runs mplJPEGProgram in the matplotlib variant:
// Pillow with libjpeg-turbo (the libjpeg 6b API, as Debian's).
func TestMatplotlibJPEG(t *testing.T) {
	ctx := context.Background()
	s, err := mplGuest(t).NewSandbox(nil)
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Run(ctx, mplJPEGProgram, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "jpg True 6.2 2.1.5\nTrue JPEG (400, 300) RGB\nJPEG (64, 64) L 0 True\nJPEG (64, 64) L 1 True\nerrors 50\n", string(res.Stdout))
	res, err = s.Run(ctx, "print(1 + 1)", nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "2\n", string(res.Stdout))
}

// TestMatplotlibExceptions: C++ exceptions thrown and caught inside
// matplotlib's and kiwisolver's modules become Python exceptions, and the
// run goes on with fuel counted as usual.
func TestMatplotlibExceptions(t *testing.T) {
	ctx := context.Background()
	s, err := mplGuest(t).NewSandbox(nil)
	require.NoError(t, err)
	defer s.Close()
	const prog = `
import kiwisolver as kiwi
from matplotlib import ft2font
import matplotlib._path as _path
n = 0
for i in range(200):
    s = kiwi.Solver()
    x = kiwi.Variable("x")
    s.addConstraint(x >= 10)
    try:
        s.addConstraint(x <= 5)        # unsatisfiable: a C++ exception inside kiwisolver
    except kiwi.UnsatisfiableConstraint:
        n += 1
    try:
        ft2font.FT2Font("/nonexistent.ttf")  # pybind11 throws, translated to OSError
    except OSError:
        n += 1
    try:
        _path.affine_transform([[1, 2, 3]], None)  # pybind11: bad arguments
    except (TypeError, ValueError):
        n += 1
print(n)
`
	res, err := s.Run(ctx, prog, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "600\n", string(res.Stdout))
	first := res.FuelUsed
	res, err = s.Run(ctx, prog, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "600\n", string(res.Stdout))
	assert.InDelta(t, float64(first), float64(res.FuelUsed), float64(first)/10, "the same work costs about the same fuel")
	res, err = s.Run(ctx, prog, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: first / 2}})
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted, "stderr: %s", res.Stderr)
	res, err = s.Run(ctx, "print(1 + 1)", nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "2\n", string(res.Stdout))
}

// agentChart is what an agent does with the data stack: a CSV, a groupby
// and a bar chart saved as PNG.
const agentChart = `
import pandas as pd
import matplotlib.pyplot as plt
with open("/tmp/sales.csv", "w") as f:
    f.write("region,month,sales\n" + "".join(f"{r},{m},{(i * 37) % 100}\n" for i, (r, m) in enumerate((r, m) for r in "NESW" for m in range(1, 13))))
df = pd.read_csv("/tmp/sales.csv")
by = df.groupby("region")["sales"].sum().sort_values()
fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
by.plot.bar(ax=ax, title="sales by region")
fig.savefig(OUT)
plt.close(fig)
print(by.to_dict())
`

// TestDataAgentChart runs agentChart in the data variant (numpy, pandas
// and matplotlib) in a one-shot run and in a session, across a snapshot
// and a fork; each PNG decodes with the figure's size.
func TestDataAgentChart(t *testing.T) {
	data := &cpython.Options{With: []string{cpython.Data}}
	if _, err := cpython.Built(data); errors.Is(err, cpython.ErrNotBuilt) {
		t.Skipf("the data variant is not built (run `%s --with data`): %v", cpython.BuildCommand, err)
	}
	ctx := context.Background()
	g, err := sandbox.CompilePython(ctx, &sandbox.Options{With: []string{cpython.Data}})
	require.NoError(t, err)
	defer g.Close()
	decode := func(b []byte) {
		t.Helper()
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		require.NoError(t, err)
		assert.Equal(t, [2]int{640, 480}, [2]int{cfg.Width, cfg.Height})
	}
	s, err := g.NewSandbox(nil)
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Run(ctx, "OUT = '/work/chart.png'\n"+agentChart, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	want := string(res.Stdout)
	assert.Contains(t, want, "'N':")
	b, err := s.Files().ReadFile("/work/chart.png")
	require.NoError(t, err)
	decode(b)

	sess, err := g.NewSession(ctx, nil)
	require.NoError(t, err)
	defer sess.Close()
	res, err = sess.Run(ctx, "OUT = '/work/a.png'\n"+agentChart, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, want, string(res.Stdout))
	var snap bytes.Buffer
	require.NoError(t, sess.Snapshot(&snap))
	r, err := g.ResumeSession(ctx, &snap, nil)
	require.NoError(t, err)
	defer r.Close()
	f, err := r.Fork(ctx)
	require.NoError(t, err)
	defer f.Close()
	for _, x := range []*sandbox.Session{r, f} {
		res, err = x.Run(ctx, "fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)\nby.plot.bar(ax=ax)\nfig.savefig('/work/b.png')\nprint(by.to_dict())", nil)
		require.NoError(t, err, "stderr: %s", res.Stderr)
		assert.Equal(t, want, string(res.Stdout))
		b, err := x.Files().ReadFile("/work/b.png")
		require.NoError(t, err)
		decode(b)
	}
}

// TestTwoArgumentCalls calls each method and getter that Pillow,
// kiwisolver and numpy declared with one parameter where Python passes
// two (secondParam): before the build's edits, each trapped with an
// indirect call of the wrong type.
func TestTwoArgumentCalls(t *testing.T) {
	s, err := mplGuest(t).NewSandbox(nil)
	require.NoError(t, err)
	defer s.Close()
	const prog = `
from PIL import Image, ImageChops
im = Image.new("RGB", (4, 3), (10, 20, 30))
print(im.getextrema(), [b.mode for b in im.split()], im.im.isblock())
print(ImageChops.invert(im).getpixel((0, 0)), im.convert("L").im.getprojection())
print(im.convert("P").im.getpalettemode())
import kiwisolver as kiwi
x = kiwi.Variable("x")
e = 2 * x + 1
c = e >= 10
s = kiwi.Solver()
s.addConstraint(c)
s.updateVariables()
print(x.name(), x.context(), x.value(), e.constant(), e.value(), len(e.terms()))
t = e.terms()[0]
print(t.variable().name(), t.coefficient(), t.value(), c.op(), c.strength(), c.violated(), len(c.expression().terms()))
print(kiwi.strength.weak, kiwi.strength.medium, kiwi.strength.strong, kiwi.strength.required)
print(len(s.dumps()) > 0)
s.reset()
import numpy as np
conv = np._core._multiarray_umath._array_converter(1, np.ones(2))
print(conv.scalar_input)
`
	res, err := s.Run(context.Background(), prog, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, `((10, 10), (20, 20), (30, 30)) ['L', 'L', 'L'] False
(245, 235, 225) (b'\x01\x01\x01\x01', b'\x01\x01\x01')
RGB
x None 4.5 1.0 10.0 1
x 2.0 9.0 >= 1001001000.0 False 1
1.0 1000.0 1000000.0 1001001000.0
True
(True, False)
`, string(res.Stdout))
}
