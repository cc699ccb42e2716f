package sandbox

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/python"
)

// These benchmarks split a first run into its parts:
//
//	go test ./sandbox -run '^$' -bench . -benchtime 5x
func loadPython(b *testing.B) []byte {
	wasm, _, err := python.Load(context.Background(), nil)
	require.NoError(b, err, "the Python guest is needed; `make test` installs it")
	return wasm
}

// BenchmarkCompileCold compiles the Python guest with an empty compilation cache.
func BenchmarkCompileCold(b *testing.B) {
	wasm := loadPython(b)
	ctx := context.Background()
	for b.Loop() {
		g, err := compile(ctx, wasm, &Options{CacheDir: b.TempDir()})
		require.NoError(b, err)
		g.Close(ctx)
	}
}

// BenchmarkCompileCached compiles the Python guest from wazero's file cache.
func BenchmarkCompileCached(b *testing.B) {
	wasm := loadPython(b)
	ctx := context.Background()
	dir := b.TempDir()
	g, err := compile(ctx, wasm, &Options{CacheDir: dir})
	require.NoError(b, err)
	g.Close(ctx)
	for b.Loop() {
		g, err := compile(ctx, wasm, &Options{CacheDir: dir})
		require.NoError(b, err)
		g.Close(ctx)
	}
}

// BenchmarkInstantiate instantiates the compiled guest without running it.
func BenchmarkInstantiate(b *testing.B) {
	ctx := context.Background()
	g, err := CompilePython(ctx, nil)
	require.NoError(b, err)
	defer g.Close(ctx)
	mc, err := moduleConfig("python", &Config{})
	require.NoError(b, err)
	for b.Loop() {
		mod, err := g.rt.InstantiateModule(ctx, g.compiled, mc)
		require.NoError(b, err)
		mod.Close(ctx)
	}
}

// BenchmarkRunPrint is a whole one-shot run of print(1): instantiate,
// CPython start-up, run, exit.
func BenchmarkRunPrint(b *testing.B) {
	ctx := context.Background()
	g, err := CompilePython(ctx, nil)
	require.NoError(b, err)
	defer g.Close(ctx)
	for b.Loop() {
		res, err := g.Run(ctx, "print(1)", nil)
		require.NoError(b, err)
		require.Equal(b, "1\n", string(res.Stdout))
	}
}
