package sandbox

import (
	"context"
	"fmt"
	"github.com/fumehood/fumehood/wasi"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/cache"
	"github.com/fumehood/fumehood/internal/pipeline"
)

// These benchmarks split a first run into its parts:
//
//	go test ./sandbox -run '^$' -bench . -benchtime 5x
func loadPython(b *testing.B) []byte {
	wasm, _, err := cpython.Load(context.Background(), nil)
	require.NoError(b, err, "the Python guest is needed; `make guest-build` builds it")
	return wasm
}

// BenchmarkCompileCold compiles the Python guest with an empty compilation cache.
func BenchmarkCompileCold(b *testing.B) {
	wasm := loadPython(b)
	ctx := context.Background()
	for b.Loop() {
		g, err := compile(ctx, wasm, &Options{CacheDir: b.TempDir()})
		require.NoError(b, err)
		g.Close()
	}
}

// BenchmarkCompileCached compiles the Python guest from wazero's file cache.
func BenchmarkCompileCached(b *testing.B) {
	wasm := loadPython(b)
	ctx := context.Background()
	dir := b.TempDir()
	g, err := compile(ctx, wasm, &Options{CacheDir: dir})
	require.NoError(b, err)
	g.Close()
	for b.Loop() {
		g, err := compile(ctx, wasm, &Options{CacheDir: dir})
		require.NoError(b, err)
		g.Close()
	}
}

// BenchmarkInstantiate instantiates the compiled guest without running it.
func BenchmarkInstantiate(b *testing.B) {
	ctx := context.Background()
	g, err := CompilePython(ctx, nil)
	require.NoError(b, err)
	defer g.Close()
	mc, err := g.moduleConfig(ctx, []string{"python"}, nil, false, 0, nil, &runState{ctx: ctx})
	require.NoError(b, err)
	for b.Loop() {
		alloc := &memoryAllocator{limit: DefaultMemoryLimit}
		mod, err := g.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, alloc), g.compiled, mc)
		require.NoError(b, err)
		mod.Close(ctx)
		alloc.release()
	}
}

// BenchmarkRunPrint is a whole one-shot run of print(1): instantiate,
// CPython start-up, run, exit.
func BenchmarkRunPrint(b *testing.B) {
	ctx := context.Background()
	g, err := CompilePython(ctx, nil)
	require.NoError(b, err)
	defer g.Close()
	for b.Loop() {
		res, err := g.Run(ctx, "print(1)", nil)
		require.NoError(b, err)
		require.Equal(b, "1\n", string(res.Stdout))
	}
}

// plainPython compiles the Python guest as the first n preparation steps
// leave it, which the pipeline keeps in its store: the baselines that
// BenchmarkFuelOverhead compares with.
func plainPython(b *testing.B, n int) *Guest {
	ctx := context.Background()
	dir, err := cache.Dir("")
	require.NoError(b, err)
	info, err := cpython.Built(nil)
	require.NoError(b, err, "the Python guest is needed; `make guest-build` builds it")
	store := pipeline.NewStore(filepath.Join(dir, "guests"))
	d, ok := store.Lookup(info.WasmSHA256, cpython.Steps[:n])
	require.True(b, ok, "the Python guest's preparation steps are not in the cache")
	wasm, err := store.Get(d)
	require.NoError(b, err)
	g, err := compile(ctx, wasm, &Options{})
	require.NoError(b, err)
	g.stdlib, err = cpython.StdlibFS(ctx, nil)
	require.NoError(b, err)
	g.python, g.id, g.pyInfo = true, d, PythonInfo{Version: info.Python, SHA256: d}
	return g
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkFuelOverhead runs the same programs on three builds of the
// guest, back to back: plain (only its debug sections stripped), unmetered
// (every preparation step but the last, fuel) and metered (the guest
// CompilePython uses). It reports the median times and the medians of
// the ratios within each round:
//
//   - fuel/plain, and fuel/plain-cpu in the process's CPU time (which a
//     busy machine's stolen time distorts less): the overhead against the
//     guest as published;
//   - fuel/unmetered: the overhead of the fuel step alone;
//   - unmetered/plain: the steps between, which do not touch the code a
//     computation runs, so this ratio shows how far code placement alone
//     moves a build's speed.
//
// Run it with:
//
//	go test ./sandbox -run '^$' -bench FuelOverhead -benchtime 20x
func BenchmarkFuelOverhead(b *testing.B) {
	ctx := context.Background()
	require.Equal(b, "strip-debug", cpython.Steps[0].Name)
	require.Equal(b, "fuel", cpython.Steps[len(cpython.Steps)-1].Name)
	plain := plainPython(b, 1)
	defer plain.Close()
	unmetered := plainPython(b, len(cpython.Steps)-1)
	defer unmetered.Close()
	metered, err := CompilePython(ctx, nil)
	require.NoError(b, err)
	defer metered.Close()

	programs := map[string]string{
		"fib25": "def fib(n): return n if n < 2 else fib(n-1) + fib(n-2)\nfib(25)",
		"loop":  "x = 0\nfor i in range(10**6): x += 1",
	}
	for name, code := range programs {
		b.Run(name, func(b *testing.B) {
			var tp, tm []time.Duration
			var wall, cpu, alone, steps []float64
			for b.Loop() {
				var w, c [3]time.Duration
				for i, g := range []*Guest{plain, unmetered, metered} {
					before := processCPU(b)
					res, err := g.Run(ctx, code, &RunOptions{Limits: Limits{Fuel: UnlimitedFuel}})
					require.NoError(b, err)
					w[i], c[i] = res.Duration, processCPU(b)-before
				}
				tp, tm = append(tp, w[0]), append(tm, w[2])
				wall = append(wall, float64(w[2])/float64(w[0]))
				cpu = append(cpu, float64(c[2])/float64(c[0]))
				alone = append(alone, float64(w[2])/float64(w[1]))
				steps = append(steps, float64(w[1])/float64(w[0]))
			}
			b.ReportMetric(float64(median(tp).Microseconds())/1000, "plain-ms")
			b.ReportMetric(float64(median(tm).Microseconds())/1000, "fuel-ms")
			b.ReportMetric(medianFloat(wall), "fuel/plain")
			b.ReportMetric(medianFloat(cpu), "fuel/plain-cpu")
			b.ReportMetric(medianFloat(alone), "fuel/unmetered")
			b.ReportMetric(medianFloat(steps), "unmetered/plain")
		})
	}
}

func medianFloat(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkDeadlineOvershoot stops `while True: pass` at a 100 ms deadline
// 50 times and reports how late the runs ended, at the median and the 99th
// percentile:
//
//	go test ./sandbox -run '^$' -bench DeadlineOvershoot -benchtime 1x
func BenchmarkDeadlineOvershoot(b *testing.B) {
	ctx := context.Background()
	g, err := CompilePython(ctx, nil)
	require.NoError(b, err)
	defer g.Close()
	const timeout = 100 * time.Millisecond
	var over []time.Duration
	for b.Loop() {
		for range 50 {
			start := time.Now()
			_, err := g.Run(ctx, "while True: pass", &RunOptions{Limits: Limits{Timeout: timeout}})
			require.ErrorIs(b, err, context.DeadlineExceeded)
			over = append(over, time.Since(start)-timeout)
		}
	}
	slices.Sort(over)
	b.ReportMetric(float64(over[len(over)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(over[len(over)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(over[len(over)-1].Microseconds())/1000, "max-ms")
}

// throughputScript writes a 64 MiB file in 1 MiB chunks under DIR, reads it
// back, and prints the seconds each took.
const throughputScript = `
import os, time
path = os.path.join(DIR, "fumehood-throughput.bin")
chunk = b"x" * (1 << 20)
t0 = time.perf_counter()
with open(path, "wb") as f:
    for _ in range(64):
        f.write(chunk)
t1 = time.perf_counter()
n = 0
with open(path, "rb") as f:
    while True:
        b = f.read(1 << 20)
        if not b:
            break
        n += len(b)
t2 = time.perf_counter()
os.remove(path)
assert n == 64 << 20
print(t1 - t0, t2 - t1)
`

// BenchmarkFileThroughput writes and reads a 64 MiB file from Python in the
// sandbox's in-memory root, and with the machine's native python3 on tmpfs
// (/dev/shm), and reports MB/s and the ratios:
//
//	go test ./sandbox -run '^$' -bench FileThroughput -benchtime 5x
func BenchmarkFileThroughput(b *testing.B) {
	native, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("no native python3 to compare with")
	}
	ctx := context.Background()
	g, err := CompilePython(ctx, nil)
	require.NoError(b, err)
	defer g.Close()
	parse := func(out string) (w, r float64) {
		_, err := fmt.Sscan(out, &w, &r)
		require.NoError(b, err, out)
		return 64 * 1.048576 / w, 64 * 1.048576 / r // MB/s
	}
	var sw, sr, nw, nr []float64
	for b.Loop() {
		s, err := g.NewSandbox(&Config{RootQuota: wasi.Quota{MaxBytes: 128 << 20, MaxFiles: 100}})
		require.NoError(b, err)
		res, err := s.Run(ctx, "DIR = '/tmp'\n"+throughputScript, nil)
		require.NoError(b, err, string(res.Stderr))
		w, r := parse(string(res.Stdout))
		sw, sr = append(sw, w), append(sr, r)
		s.Close()

		out, err := exec.Command(native, "-c", "DIR = '/dev/shm'\n"+throughputScript).Output()
		require.NoError(b, err)
		w, r = parse(string(out))
		nw, nr = append(nw, w), append(nr, r)
	}
	med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(med(sw), "sandbox-write-MB/s")
	b.ReportMetric(med(sr), "sandbox-read-MB/s")
	b.ReportMetric(med(nw), "native-write-MB/s")
	b.ReportMetric(med(nr), "native-read-MB/s")
	b.ReportMetric(med(sw)/med(nw), "write-ratio")
	b.ReportMetric(med(sr)/med(nr), "read-ratio")
}
