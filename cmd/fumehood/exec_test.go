package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/testenv"
)

// TestExec: fumehood exec runs a WASI program with its arguments, stdin,
// environment and files, returns its exit status, and stops it at the
// limits run has, with run's statuses.
func TestExec(t *testing.T) {
	wasm := filepath.Join(t.TempDir(), "guest.wasm")
	require.NoError(t, os.WriteFile(wasm, testenv.BuildGo(t, "guests/testguest"), 0o644))
	host := filepath.Join(t.TempDir(), "in.txt")
	require.NoError(t, os.WriteFile(host, []byte("data"), 0o644))

	code, out, errs := fumehood(t, "", "exec", wasm, "args", "a", "b c")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, "a\nb c\n", out)

	code, out, errs = fumehood(t, "piped", "exec", wasm, "cat")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, "piped", out)

	code, out, _ = fumehood(t, "", "exec", "--env", "K=v", wasm, "env")
	assert.Equal(t, 0, code)
	assert.Equal(t, "K=v\n", out, "the environment is the caller's only")

	code, out, errs = fumehood(t, "", "exec", "--file", host+":/work/in.txt", wasm, "ls", "/work")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, "in.txt\n", out)

	code, _, _ = fumehood(t, "", "exec", wasm, "exit", "7")
	assert.Equal(t, 7, code, "the program's own status")

	code, _, errs = fumehood(t, "", "exec", "--fuel", "50000000", wasm, "spin")
	assert.Equal(t, exitFuel, code)
	assert.Contains(t, errs, "fumehood: fuel exhausted")
	code, _, errs = fumehood(t, "", "exec", "--max-output", "1KiB", wasm, "write", "100000")
	assert.Equal(t, exitOutput, code)
	assert.Contains(t, errs, "fumehood: output limit")

	code, _, errs = fumehood(t, "", "exec")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "exec needs FILE.wasm")
	code, _, errs = fumehood(t, "", "exec", "--snapshot", "x.snap", wasm)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "no sessions")
	require.NoError(t, os.WriteFile(host, []byte("not wasm"), 0o644))
	code, _, errs = fumehood(t, "", "exec", host)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "invalid guest module")
}
