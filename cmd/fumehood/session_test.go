package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSessionAcrossProcesses is the shell story: x = 41 in one process,
// saved; print(x + 1) in another prints 42.
func TestSessionAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "1.snap"), filepath.Join(dir, "2.snap")
	out, errs, err := subprocess(t, "run", "--snapshot", first, "-c", "x = 41\nopen('/work/f', 'w').write('file')")
	require.NoError(t, err, errs)
	assert.Equal(t, "4\n", out, "the value of the final expression")
	out, errs, err = subprocess(t, "run", "--resume", first, "--snapshot", second, "-c", "print(x + 1)\nx = 100")
	require.NoError(t, err, errs)
	assert.Equal(t, "42\n", out)
	out, errs, err = subprocess(t, "run", "--resume", second, "-c", "x, open('/work/f').read()")
	require.NoError(t, err, errs)
	assert.Equal(t, "(100, 'file')\n", out)

	// A damaged snapshot is refused, in words.
	data, err := os.ReadFile(second)
	require.NoError(t, err)
	data[len(data)/2] ^= 1
	bad := filepath.Join(dir, "bad.snap")
	require.NoError(t, os.WriteFile(bad, data, 0o600))
	code, _, errs := fumehood(t, "", "run", "--resume", bad, "-c", "x")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "corrupt snapshot")

	code, _, errs = fumehood(t, "", "run", "--resume", second, "-c", "1/0")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "ZeroDivisionError")
	code, _, _ = fumehood(t, "", "run", "--resume", second, "-c", "x", "extra-arg")
	assert.Equal(t, exitUsage, code)
}

func TestRepl(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "repl.snap")
	input := "x = 41\ndef f(n):\n    return n + 1\n\nf(x)\n[1,\n 2]\n1/0\nwhile True: pass\nx\n:snapshot " + snap + "\n:bogus\n"
	code, out, errs := fumehood(t, input, "repl", "--timeout", "1s")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, "42\n[1, 2]\n41\n", out)
	assert.Contains(t, errs, "ZeroDivisionError")
	assert.Contains(t, errs, "deadline exceeded")
	assert.Contains(t, errs, "saved to "+snap)
	assert.Contains(t, errs, "unknown command :bogus")

	code, out, errs = fumehood(t, "f(x) * 2\nexit(7)\nprint('not reached')\n", "repl", "--resume", snap)
	assert.Equal(t, 7, code, errs)
	assert.Equal(t, "84\n", out)
}
