package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/bench/internal/cpuset"
)

func TestMedian(t *testing.T) {
	assert.Equal(t, 0.0, median(nil))
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	assert.InDelta(t, 4.0, geomean([]float64{2, 8, 0}), 1e-9, "a missing value (0) is left out")
	assert.Equal(t, 0.0, div(1, 0))
}

func TestSplice(t *testing.T) {
	doc := "# Benchmarks\n\nintro\n"
	once := splice(doc, "table 1\n")
	assert.Equal(t, "# Benchmarks\n\nintro\n\n"+beginMarker+"\ntable 1\n"+endMarker+"\n", once)
	twice := splice(once+"\n## Experiments\n", "table 2\n")
	assert.Contains(t, twice, beginMarker+"\ntable 2\n"+endMarker)
	assert.NotContains(t, twice, "table 1")
	assert.True(t, strings.HasSuffix(twice, "## Experiments\n"), "text after the markers is kept")
}

func TestReport(t *testing.T) {
	r := &Report{
		Config: RunOptions{ColdReps: 3, WarmReps: 3, CPUReps: 3},
		Cold:   []Timing{{Name: "native python3 -c", Median: 20, Ratio: 1}, {Name: "Pyodide", Median: 2000, Ratio: 100}},
		Warm:   []Timing{{Name: "runs", Median: 25.5, Unit: "runs/s"}},
		CPU: []CPURow{
			{Program: "fib", What: "fib(27)", Native: 20, Fumehood: 80, Pyodide: 40, VsNative: 4, VsPyodide: 2, PyoNative: 2},
			{Program: "loop", What: "loop", Native: 10, Fumehood: 90, VsNative: 9},
		},
		Memory: []MemRow{{Kind: "live", N: 10, TotalMB: 90, PerMB: 9}},
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	out := md.String()
	for _, want := range []string{
		"| Pyodide | 2000 | 100x |",
		"| runs | 25.5 | runs/s | — |",
		"| fib: fib(27) | 20.0 | 80.0 | 40.0 | 4.00x | 2.00x | 2.00x |",
		"| loop: loop | 10.0 | 90.0 | — | 9.00x | — | — |",
		"| **geometric mean** |  |  |  | 6.00x | 2.00x | 2.00x |",
		"| live | 10 | 90.0 | 9.00 |",
	} {
		assert.Contains(t, out, want)
	}

	var j bytes.Buffer
	require.NoError(t, r.WriteJSON(&j))
	var back Report
	require.NoError(t, json.Unmarshal(j.Bytes(), &back))
	assert.Equal(t, r.CPU, back.CPU)
}

func TestPrograms(t *testing.T) {
	names := map[string]bool{}
	for _, p := range cpuset.Programs {
		assert.False(t, names[p.Name], "duplicate %s", p.Name)
		names[p.Name] = true
		assert.Contains(t, p.Code, "def run(")
		assert.True(t, strings.HasSuffix(cpuset.Harness(p), "print(_t.perf_counter() - _t0)\n"))
	}
	s, err := seconds("noise\n0.25\n")
	require.NoError(t, err)
	assert.Equal(t, 0.25, s)
	_, err = seconds("Traceback")
	assert.Error(t, err)
}

// TestProgramsNative runs the CPU set once in the machine's python3: every
// program must pass its own check, or the bench would time a failure.
func TestProgramsNative(t *testing.T) {
	if testing.Short() {
		t.Skip("runs python3")
	}
	py, err := nativePython()
	if err != nil {
		t.Skip("no python3")
	}
	for _, p := range cpuset.Programs {
		out, err := exec.Command(py, "-c", cpuset.Harness(p)).CombinedOutput()
		require.NoError(t, err, "%s: %s", p.Name, out)
		_, err = seconds(string(out))
		assert.NoError(t, err, p.Name)
	}
}
