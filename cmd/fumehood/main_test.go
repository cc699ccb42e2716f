package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// fumehood runs the command line in-process. A command that runs Python
// (run, repl, mcp) needs the built guest: without it the test is skipped,
// or fails with $FUMEHOOD_REQUIRE_GUEST set (sandboxtest.Built).
func fumehood(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if len(args) > 0 && slices.Contains([]string{"run", "repl", "mcp"}, args[0]) {
		sandboxtest.Built(t)
	}
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

// TestRunFileNamesScript: `fumehood run FILE.py` sets sys.argv[0] to the
// script's name and its tracebacks show the file's lines (issue 18).
func TestRunFileNamesScript(t *testing.T) {
	script := filepath.Join(t.TempDir(), "job.py")
	require.NoError(t, os.WriteFile(script, []byte("import sys\nprint(sys.argv)\nraise ValueError('bad')\n"), 0o644))
	code, out, errs := fumehood(t, "", "run", script, "arg")
	assert.Equal(t, 1, code)
	assert.Equal(t, "['"+script+"', 'arg']\n", out)
	assert.Contains(t, errs, "File \""+script+"\", line 3, in <module>\n    raise ValueError('bad')\n")
}

func TestRunCodeFromStdin(t *testing.T) {
	code, out, errs := fumehood(t, "print(6*7)\n", "run", "-")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, "42\n", out)
}

func TestRunTimeout(t *testing.T) {
	code, out, errs := fumehood(t, "", "run", "--timeout", "2s", "-c", "print('go')\nwhile True: pass")
	assert.Equal(t, exitDeadline, code)
	assert.Equal(t, "go\n", out)
	assert.Contains(t, errs, "deadline exceeded")
}

// TestRunStackOverflow checks that a guest that runs out of stack (the
// hash of a tuple nested a million deep recurses in C that counts no
// recursion, past the runtime's call stack) exits with its own status and
// says so, not fumehood's failure status.
func TestRunStackOverflow(t *testing.T) {
	code, _, errs := fumehood(t, "", "run", "-c", "t = ()\nfor _ in range(10**6):\n    t = (t,)\nhash(t)\n")
	assert.Equal(t, exitStack, code, errs)
	assert.Contains(t, errs, "ran out of stack")
}

func TestRunEnv(t *testing.T) {
	code, out, errs := fumehood(t, "", "run", "--env", "A=1", "--env", "B=two", "-c", "import os; print(sorted(os.environ.items()))")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, "[('A', '1'), ('B', 'two')]\n", out)
}

// TestRunWithoutGuest: without a built guest, run fails naming the
// command that builds it.
func TestRunWithoutGuest(t *testing.T) {
	code, _, errs := fumehood(t, "", "run", "--cache-dir", t.TempDir(), "-c", "print(1)")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "fumehood guest build")
}

// TestGuestInstallExplains: guest install, gone with the npm guest, says
// what to run instead.
func TestGuestInstallExplains(t *testing.T) {
	code, _, errs := fumehood(t, "", "guest", "install")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "fumehood guest build")
	assert.Contains(t, errs, "fumehood guest import")
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
			assert.True(t, strings.Contains(errs, "Usage") || strings.Contains(errs, "-h' for"), errs)
		})
	}
	// A bad flag value: the error once, where the help is, not pages of it.
	for _, args := range [][]string{
		{"run", "--mount", "/nonexist:/x:zz", "-c", "1"},
		{"mcp", "--mount", "/nonexist:/x:zz"},
		{"run", "--no-such-flag", "-c", "1"},
		{"guest", "build", "--no-such-flag"},
	} {
		code, _, errs := fumehood(t, "", args...)
		assert.Equal(t, exitUsage, code, args)
		assert.Equal(t, 1, strings.Count(errs, "fumehood: "), errs)
		assert.LessOrEqual(t, strings.Count(errs, "\n"), 2, errs)
		assert.NotContains(t, errs, "Usage", args)
		if args[1] == "--mount" {
			assert.Equal(t, 1, strings.Count(errs, "/nonexist:/x:zz"), errs)
		}
	}
	// Help still prints the flags; a flag's value is named, not a command.
	code, _, errs := fumehood(t, "", "run", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, errs, "-with PARTS\n")
	code, _, errs = fumehood(t, "", "run", "does-not-exist.py")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "does-not-exist.py")
}

func TestGuestInfo(t *testing.T) {
	sandboxtest.Built(t)
	code, out, errs := fumehood(t, "", "guest", "info")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "CPython 3.13.5 for wasm32-wasi")
	assert.Contains(t, out, preparedSteps())

	code, _, errs = fumehood(t, "", "guest", "info", "--cache-dir", t.TempDir())
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "fumehood guest build")
}

// TestGuestExportImport exports the built guest with the command line,
// imports it into a fresh cache directory, and refuses a damaged copy.
func TestGuestExportImport(t *testing.T) {
	sandboxtest.Built(t)
	file := filepath.Join(t.TempDir(), "guest.tar")
	code, _, errs := fumehood(t, "", "guest", "export", file)
	require.Equal(t, 0, code, errs)
	dir := t.TempDir()
	code, _, errs = fumehood(t, "", "guest", "import", "--cache-dir", dir, file)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "imported CPython 3.13.5")
	code, out, errs := fumehood(t, "", "guest", "info", "--cache-dir", dir)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "CPython 3.13.5 for wasm32-wasi")

	b, err := os.ReadFile(file)
	require.NoError(t, err)
	bad := filepath.Join(t.TempDir(), "bad.tar")
	require.NoError(t, os.WriteFile(bad, b[:len(b)/2], 0o644))
	empty := t.TempDir()
	code, _, errs = fumehood(t, "", "guest", "import", "--cache-dir", empty, bad)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "bad.tar")
	assert.Contains(t, errs, "truncated")
	entries, err := os.ReadDir(empty)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing cached")

	code, _, errs = fumehood(t, "", "guest", "export")
	assert.Equal(t, exitUsage, code, errs)
}

func TestLimitExitStatuses(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		code  int
		words string
	}{
		{"fuel", []string{"--fuel", "100000000", "-c", "while True: pass"}, exitFuel, "fuel exhausted"},
		{"deadline", []string{"--timeout", "200ms", "-c", "while True: pass"}, exitDeadline, "deadline exceeded"},
		{"memory", []string{"--memory", "64MiB", "-c", "x = bytearray(100 * 2**20)"}, exitMemory, "memory limit"},
		{"output", []string{"--max-output", "1KiB", "-c", "while True: print('spam')"}, exitOutput, "output limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := fumehood(t, "", append([]string{"run"}, c.args...)...)
			assert.Equal(t, c.code, code)
			assert.Contains(t, errs, "fumehood: "+c.words)
		})
	}
	// Each cause has its own status.
	seen := map[int]bool{}
	for stop := sandbox.StopExit; stop <= sandbox.StopStack; stop++ {
		code, words, _ := stopped(stop)
		if words == "" {
			continue
		}
		assert.False(t, seen[code], "status %d used twice", code)
		seen[code] = true
		assert.NotEqual(t, exitFailure, code)
	}
	assert.Len(t, seen, 6, "fuel, deadline, memory, output, canceled, stack")
}

func TestStats(t *testing.T) {
	code, out, errs := fumehood(t, "", "run", "--stats", "-c", "print('x' * 10)")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "xxxxxxxxxx\n", out)
	var s stats
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(errs)), &s), errs)
	assert.Positive(t, s.FuelUsed)
	assert.Positive(t, s.WallMS)
	assert.Positive(t, s.PeakMemory)
	assert.Equal(t, int64(11), s.StdoutBytes)
	assert.Equal(t, 0, s.ExitCode)
	assert.Empty(t, s.StoppedBy)

	code, _, errs = fumehood(t, "", "run", "--stats", "--fuel", "100000000", "-c", "while True: pass")
	assert.Equal(t, exitFuel, code)
	line, _, _ := strings.Cut(errs, "\n")
	require.NoError(t, json.Unmarshal([]byte(line), &s), errs)
	assert.Equal(t, "fuel exhausted", s.StoppedBy)
	assert.Equal(t, int64(100000000), s.FuelUsed)
}

func TestBadLimitFlags(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--memory", "lots", "-c", "1"},
		{"run", "--max-output", "0", "-c", "1"},
		{"run", "--fuel", "-5", "-c", "1"},
	} {
		code, _, _ := fumehood(t, "", args...)
		assert.Equal(t, exitUsage, code, args)
	}
}

// TestDeterministicAcrossProcesses runs the same program in two processes
// of the command and compares their output and fuel.
func TestDeterministicAcrossProcesses(t *testing.T) {
	program := "import random, time\nprint(random.random(), time.time(), hash('x'))\nprint(sum(range(12345)))"
	var outs, fuels []string
	for range 2 {
		stdout, stderr, err := subprocess(t, "run", "--deterministic", "--stats", "-c", program)
		require.NoError(t, err, stderr)
		var s stats
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(stderr)), &s), stderr)
		outs = append(outs, stdout)
		fuels = append(fuels, strconv.FormatInt(s.FuelUsed, 10))
	}
	assert.Equal(t, outs[0], outs[1])
	assert.Equal(t, fuels[0], fuels[1])
	assert.Contains(t, outs[0], "1704067200.")
}

// TestMain lets a test run this binary as the fumehood command.
func TestMain(m *testing.M) {
	if os.Getenv("FUMEHOOD_TEST_MAIN") == "1" {
		main()
		return
	}
	if os.Getenv("FUMEHOOD_TEST_HUGEHEAP") == "1" {
		hugeHeapChild()
		return
	}
	os.Exit(m.Run())
}

// subprocess runs the fumehood command in a new process (this test binary,
// acting as main).
func subprocess(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	sandboxtest.Built(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "FUMEHOOD_TEST_MAIN=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), err
}

func TestVolumeSurvivesAcrossProcesses(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "vol")
	counter := `
import os
n = int(open("/data/n").read()) if os.path.exists("/data/n") else 0
open("/data/n", "w").write(str(n + 1))
print(n + 1)`
	for want := 1; want <= 2; want++ {
		out, errs, err := subprocess(t, "run", "--volume", vol+":/data", "-c", counter)
		require.NoError(t, err, errs)
		assert.Equal(t, strconv.Itoa(want)+"\n", out)
	}
	b, err := os.ReadFile(filepath.Join(vol, "n"))
	require.NoError(t, err)
	assert.Equal(t, "2", string(b))
}

func TestMountAndFileFlags(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from the host"), 0o644))
	extra := filepath.Join(t.TempDir(), "extra.json")
	require.NoError(t, os.WriteFile(extra, []byte(`{"k": 1}`), 0o644))
	code, out, errs := fumehood(t, "", "run", "--mount", dir+":/in:ro", "--file", extra+":/work/cfg/extra.json", "-c", `
import json
print(open("/in/in.txt").read(), json.load(open("/work/cfg/extra.json"))["k"])
try:
    open("/in/new.txt", "w")
except OSError as e:
    print(e.strerror)
`)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "from the host 1\nRead-only file system\n", out)
	_, err := os.Stat(filepath.Join(dir, "new.txt"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	for _, bad := range [][]string{
		{"run", "--mount", "nodir", "-c", "1"},
		{"run", "--mount", dir + ":relative", "-c", "1"},
		{"run", "--mount", filepath.Join(dir, "missing") + ":/x", "-c", "1"},
		{"run", "--mount", dir + ":/m:RO", "-c", "1"}, // once a writable /m:RO
		{"run", "--mount", dir + ":/m:readonly", "-c", "1"},
		{"run", "--mount", dir + ":/m:", "-c", "1"},
		{"run", "--volume", dir + ":/v:ro", "-c", "1"}, // once a writable /v:ro
		{"run", "--file", "nofile", "-c", "1"},
	} {
		code, _, _ := fumehood(t, "", bad...)
		assert.Equal(t, exitUsage, code, bad)
	}
}

// TestMountFlagModes: a mode after the guest path is ro or rw, nothing
// else; a misspelt one is refused instead of becoming part of a writable
// guest path.
func TestMountFlagModes(t *testing.T) {
	dir := t.TempDir()
	for v, readOnly := range map[string]bool{dir + ":/m": false, dir + ":/m:ro": true, dir + ":/m:rw": false, dir + ":/m/:ro": true} {
		var m mountFlags
		require.NoError(t, m.add(false)(v), v)
		require.Len(t, m, 1)
		assert.Equal(t, "/m", m[0].Path, v)
		assert.Equal(t, readOnly, m[0].ReadOnly, v)
	}
	for _, v := range []string{dir + ":/m:RO", dir + ":/m:Ro", dir + ":/m:RW", dir + ":/m:r", dir + ":/m:", dir + ":/m:ro:ro", dir + ":/m:x:ro"} {
		var m mountFlags
		err := m.add(false)(v)
		assert.Error(t, err, v)
		assert.Empty(t, m, v)
	}
	var m mountFlags
	assert.ErrorContains(t, m.add(true)(filepath.Join(dir, "vol")+":/v:ro"), "takes no mode")
	assert.Empty(t, m)
}

// TestGuestInfoBuilt: `guest info --built` names the build command when the
// built guest is not in the cache, and shows inputs, flags and digests when
// it is.
func TestGuestInfoBuilt(t *testing.T) {
	code, _, errs := fumehood(t, "", "guest", "info", "--cache-dir", t.TempDir())
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "fumehood guest build")

	code, _, errs = fumehood(t, "", "guest", "info", "--with", "numpy", "--cache-dir", t.TempDir())
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "fumehood guest build --with numpy")
	code, _, errs = fumehood(t, "", "guest", "info", "--with", "pandas", "--cache-dir", t.TempDir())
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "fumehood guest build --with numpy,pandas", "pandas implies numpy")
	code, _, errs = fumehood(t, "", "guest", "info", "--with", "scipy", "--cache-dir", t.TempDir())
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "unknown optional part")

	sandboxtest.Built(t)
	code, out, errs := fumehood(t, "", "guest", "info", "--built")
	require.Equal(t, 0, code, errs)
	for _, want := range []string{"CPython 3.13.5", "python3.13_3.13.5.orig.tar.xz", "sha256:", "OPT=-DNDEBUG -O2", preparedSteps()} {
		assert.Contains(t, out, want)
	}
}

// TestRunWithNumpy runs code on the numpy variant with --with numpy: an
// error naming the variant's build command where it is not built (never an
// build started), and numpy where it is.
func TestRunWithNumpy(t *testing.T) {
	code, _, errs := fumehood(t, "", "run", "--with", "numpy", "--cache-dir", t.TempDir(), "-c", "print(1)")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "fumehood guest build --with numpy")
	code, _, errs = fumehood(t, "", "exec", "--with", "numpy", "x.wasm")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "--with is for Python")

	if _, err := cpython.Built(&cpython.Options{With: []string{cpython.Numpy}}); err != nil {
		t.Skipf("the numpy variant is not built (make guest-build-numpy): %v", err)
	}
	code, out, errs := fumehood(t, "", "run", "--with", "numpy", "-c",
		"import numpy as np; print(int(np.arange(5).sum()), np.linalg.solve([[2.0, 0], [0, 4.0]], [2.0, 4.0]))")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "10 [1. 1.]\n", out)

	// Sessions of the variant: an array kept in a snapshot and used
	// again in another process.
	snap := filepath.Join(t.TempDir(), "s.snap")
	code, _, errs = fumehood(t, "", "run", "--with", "numpy", "--snapshot", snap, "-c", "import numpy as np\na = np.arange(5) * 2")
	require.Equal(t, 0, code, errs)
	code, out, errs = fumehood(t, "", "run", "--with", "numpy", "--resume", snap, "-c", "print(int(a.sum()), a.shape)")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "20 (5,)\n", out)
}

// TestRunPassesAllOutput: the CLI passes a 2 MB print on whole, as python
// does, instead of stopping at the sandbox's 1 MiB; --max-output still
// stops a run that writes more.
func TestRunPassesAllOutput(t *testing.T) {
	code, out, errs := fumehood(t, "", "run", "-c", "print('x' * 2_000_000); print('end')")
	assert.Equal(t, 0, code, errs)
	assert.Equal(t, strings.Repeat("x", 2_000_000)+"\nend\n", out)
	code, _, errs = fumehood(t, "", "run", "--max-output", "1MiB", "-c", "print('x' * 2_000_000)")
	assert.Equal(t, exitOutput, code, errs)
}

// preparedSteps is how guest info lists the current preparation steps
// (cpython.Steps), which a guest built now went through.
func preparedSteps() string {
	var ids []string
	for _, s := range cpython.Steps {
		ids = append(ids, s.ID())
	}
	return strings.Join(ids, ", ")
}
