package codetool_test

import (
	"bytes"
	"context"
	"image/png"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// dataParts are the optional parts of the guest the data tests run on:
// numpy, pandas and matplotlib (`fumehood guest build --with data`).
var dataParts = []string{"pandas", "matplotlib"}

// dataGuest compiles the data variant, skipping (or failing, with
// FUMEHOOD_REQUIRE_GUEST) where it is not built.
func dataGuest(t *testing.T) *sandbox.Guest {
	t.Helper()
	sandboxtest.Built(t, dataParts...)
	py, err := sandbox.CompilePython(context.Background(), &sandbox.Options{With: dataParts})
	require.NoError(t, err)
	t.Cleanup(func() { py.Close() })
	return py
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
