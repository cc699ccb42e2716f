package codetool_test

import (
	"bytes"
	"context"
	"image/png"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// dataGuest compiles the data variant (numpy, pandas and matplotlib:
// `fumehood guest build --with data`), skipping where it is not built.
func dataGuest(t *testing.T) *sandbox.Guest {
	t.Helper()
	return sandboxtest.Variant(t, cpython.Data)
}

// The calls of an agent doing data work, in one conversation: a CSV made
// and read, grouped, then charted, saved and shown.
const (
	agentCSV = `
import numpy as np, pandas as pd
rng = np.random.default_rng(7)
n = 5000
pd.DataFrame({
    "day": pd.date_range("2024-01-01", periods=n, freq="h"),
    "region": rng.choice(["north", "south", "east", "west"], n),
    "sales": rng.gamma(2.0, 50.0, n).round(2),
}).to_csv("/work/sales.csv", index=False)
df = pd.read_csv("/work/sales.csv", parse_dates=["day"])
by_region = df.groupby("region")["sales"].agg(["sum", "mean", "count"]).sort_values("sum")
daily = df.set_index("day")["sales"].resample("D").sum()
print(by_region.shape, len(daily))
`
	agentChart = `
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
daily.plot(ax=ax, title="sales per day")
fig.savefig("/work/daily.png")
plt.close(fig)
by_region["sum"].plot(kind="bar", figsize=(3, 2))
plt.show()
`
)

// pngSize decodes a PNG and returns its size.
func pngSize(t *testing.T, data []byte) (int, int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	require.NoError(t, err)
	return img.Bounds().Dx(), img.Bounds().Dy()
}

// TestAgentDataWork runs an agent's calls through the code tool on the
// data variant: the chart saved and the one shown come back as PNG images
// of the sizes asked for.
func TestAgentDataWork(t *testing.T) {
	tool, err := codetool.New(dataGuest(t), nil)
	require.NoError(t, err)
	defer tool.Close()
	ctx := context.Background()

	res := tool.Call(ctx, "agent", args(agentCSV))
	require.False(t, res.IsError, res.Text())
	assert.Equal(t, "(4, 3) 209\n", res.Stdout)

	res = tool.Call(ctx, "agent", args(agentChart))
	require.False(t, res.IsError, res.Text())
	assert.Contains(t, res.Stdout, "plt.show(): figure saved to /work/figure-1.png")
	sizes := map[string][2]int{}
	for _, f := range res.Images() {
		require.Equal(t, "image/png", f.MediaType, f.Path)
		w, h := pngSize(t, f.Data)
		sizes[f.Path] = [2]int{w, h}
	}
	assert.Equal(t, map[string][2]int{"/work/daily.png": {600, 400}, "/work/figure-1.png": {300, 200}}, sizes)
}

// TestDataSessionSnapshotFork: a session that read the data and drew a
// chart is snapshotted, resumed and forked; each copy charts again from
// the state it kept.
func TestDataSessionSnapshotFork(t *testing.T) {
	py := dataGuest(t)
	ctx := context.Background()
	s, err := py.NewSession(ctx, nil)
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Run(ctx, agentCSV, nil)
	require.NoError(t, err, "%s", res.Stderr)

	var snap bytes.Buffer
	require.NoError(t, s.Snapshot(&snap))
	resumed, err := py.ResumeSession(ctx, &snap, nil)
	require.NoError(t, err)
	defer resumed.Close()
	fork, err := s.Fork(ctx)
	require.NoError(t, err)
	defer fork.Close()

	for name, sess := range map[string]*sandbox.Session{"original": s, "resumed": resumed, "fork": fork} {
		res, err := sess.Run(ctx, agentChart, nil)
		require.NoError(t, err, "%s: %s", name, res.Stderr)
		data, more, err := sess.Files().ReadFileLimit("/work/daily.png", 1<<20)
		require.NoError(t, err, name)
		require.False(t, more, name)
		w, h := pngSize(t, data)
		assert.Equal(t, [2]int{600, 400}, [2]int{w, h}, name)
	}
}

// cppThrow calls matplotlib's C++ (pybind11) with points of the wrong
// shape 200 times: each call throws a C++ exception, which pybind11
// catches and raises as ValueError. Then a chart still renders.
const cppThrow = `
import numpy as np
from matplotlib import _path
from matplotlib.path import Path
import matplotlib.pyplot as plt
p = Path([[0, 0], [1, 0], [1, 1]])
kinds = set()
for i in range(200):
    try:
        _path.points_in_path(np.zeros((5, 3)), 0.0, p, None)
    except Exception as e:
        kinds.add(type(e).__name__)
print(sorted(kinds))
print(_path.points_in_path(np.array([[0.9, 0.1], [0.1, 0.9]]), 0.0, p, None).tolist())
fig = plt.figure(figsize=(2, 2))
plt.plot([0, 1], [1, 0])
fig.savefig("/work/after.png")
`

// TestDataLimitsInCpp: a C++ exception thrown and caught inside matplotlib
// neither disturbs fuel (the same run uses the same fuel, run after run)
// nor the run's outcome; a render too long for its fuel or its deadline
// is stopped, and the session goes on.
func TestDataLimitsInCpp(t *testing.T) {
	py := dataGuest(t)
	ctx := context.Background()
	var fuel []int64
	for range 2 {
		sb, err := py.NewSandbox(&sandbox.Config{Deterministic: true})
		require.NoError(t, err)
		res, err := sb.Run(ctx, cppThrow, nil)
		sb.Close()
		require.NoError(t, err, "%s", res.Stderr)
		assert.Equal(t, "['ValueError']\n[1.0, 0.0]\n", string(res.Stdout))
		fuel = append(fuel, res.FuelUsed)
	}
	assert.Equal(t, fuel[0], fuel[1], "the same run uses the same fuel")

	s, err := py.NewSession(ctx, nil)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Run(ctx, "import numpy as np, matplotlib.pyplot as plt\nx = 1", nil)
	require.NoError(t, err)
	render := "fig = plt.figure(figsize=(20, 20), dpi=200)\n" +
		"for i in range(50): plt.plot(np.random.rand(200000), np.random.rand(200000), 'o')\n" +
		"fig.savefig('/work/huge.png')"
	res, err := s.Run(ctx, render, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 2e9}})
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	assert.Equal(t, sandbox.StopFuel, res.Stop)
	res, err = s.Run(ctx, render, &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 300 * time.Millisecond}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, sandbox.StopDeadline, res.Stop)
	res, err = s.Run(ctx, "x + 1", nil)
	require.NoError(t, err)
	assert.Equal(t, "2", res.Value, "the session goes on from before the stopped runs")
}
