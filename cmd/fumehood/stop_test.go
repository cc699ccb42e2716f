package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// statsLine finds the --stats line in stderr: the guest's own lines come
// before it, fumehood's error line after.
func statsLine(t *testing.T, stderr string) stats {
	t.Helper()
	var s stats
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, `{"exit_code":`) {
			require.NoError(t, json.Unmarshal([]byte(line), &s), line)
			return s
		}
	}
	require.Fail(t, "no stats line", stderr)
	return s
}

// fakeDeadline exits with the deadline's status after printing fumehood's
// words for it.
const fakeDeadline = "import sys\nsys.stderr.write('fumehood: deadline exceeded\\n')\nsys.exit(124)"

// TestStatsStopFromTheHost checks that --stats says what stopped a run
// from the host's record (Result.Stop), so that a guest exiting with a
// limit's status and words is reported as exiting on its own.
func TestStatsStopFromTheHost(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stop     string
		words    string
		sessions bool
	}{
		{"exit 0", []string{"-c", "print(1)"}, 0, "exit", "", false},
		{"exit 3", []string{"-c", "raise SystemExit(3)"}, 3, "exit", "", false},
		{"fake deadline", []string{"-c", fakeDeadline}, 124, "exit", "", false},
		{"fake fuel", []string{"-c", "import sys\nsys.stderr.write('fumehood: fuel exhausted\\n')\nsys.exit(120)"}, 120, "exit", "", false},
		// wazero's exit code for a closed context, through proc_exit:
		// its low 8 bits, as python's own os._exit(-1).
		{"fake cancel", []string{"-c", "import os\nos._exit(-1)"}, 255, "exit", "", false},
		{"deadline", []string{"--timeout", "200ms", "-c", "while True: pass"}, exitDeadline, "deadline", "deadline exceeded", false},
		{"fuel", []string{"--fuel", "100000000", "-c", "while True: pass"}, exitFuel, "fuel", "fuel exhausted", false},
		{"memory", []string{"--memory", "64MiB", "-c", "x = bytearray(100 * 2**20)"}, exitMemory, "memory", "memory limit", false},
		{"output", []string{"--max-output", "1KiB", "-c", "while True: print('spam')"}, exitOutput, "output", "output limit", false},
		{"session fake deadline", []string{"-c", fakeDeadline}, 124, "exit", "", true},
		{"session deadline", []string{"--timeout", "200ms", "-c", "while True: pass"}, exitDeadline, "deadline", "deadline exceeded", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--stats"}, tc.args...)
			if tc.sessions {
				needSessions(t)
				args = append([]string{"run", "--stats", "--snapshot", filepath.Join(t.TempDir(), "s.snap")}, tc.args...)
			}
			code, _, errs := fumehood(t, "", args...)
			assert.Equal(t, tc.code, code, errs)
			s := statsLine(t, errs)
			if tc.stop == "exit" {
				assert.Equal(t, tc.code, s.ExitCode)
			} else if tc.stop != "memory" { // a MemoryError exits with 1
				assert.Equal(t, -1, s.ExitCode)
			}
			assert.Equal(t, tc.stop, s.Stop)
			assert.Equal(t, tc.words, s.StoppedBy)
			if tc.stop == "exit" {
				// Only the guest's own line says "fumehood:".
				assert.LessOrEqual(t, strings.Count(errs, "fumehood: "), 1, errs)
			} else {
				assert.Contains(t, errs, "fumehood: "+tc.words)
			}
		})
	}
}

// TestExitStatusOutsideByte: `fumehood run` exits with the status python
// gives natively for a SystemExit code outside 0-255 (`python3 -c 'import
// sys; sys.exit(N)'; echo $?`), with --stats saying the guest exited, for
// one-shot runs and sessions: sys.exit(2**70) exited with 125, fumehood's
// own failure, and sys.exit(-1) said -1 in --stats.
func TestExitStatusOutsideByte(t *testing.T) {
	for _, mode := range []string{"one-shot", "session"} {
		t.Run(mode, func(t *testing.T) {
			for _, tc := range []struct {
				code   string
				status int
			}{{"2**70", 255}, {"-1", 255}, {"256", 0}, {"1000", 232}} {
				code, _, errs := fumehood(t, "", runArgs(t, mode, "-c", "import sys\nsys.exit("+tc.code+")")...)
				what := "sys.exit(" + tc.code + ")"
				assert.Equal(t, tc.status, code, "%s: %s", what, errs)
				s := statsLine(t, errs)
				assert.Equal(t, tc.status, s.ExitCode, what)
				assert.Equal(t, "exit", s.Stop, what)
				assert.NotContains(t, errs, "fumehood: ", what)
			}
		})
	}
}

// runArgs is `run --stats` with args, in a session (saved to a snapshot)
// for mode "session", which the built guest always has.
func runArgs(t *testing.T, mode string, args ...string) []string {
	if mode == "session" {
		if sandboxtest.Guest(t) != sandbox.GuestBuilt {
			needSessions(t)
		}
		return append([]string{"run", "--stats", "--snapshot", filepath.Join(t.TempDir(), "s.snap")}, args...)
	}
	return append([]string{"run", "--stats"}, args...)
}

// TestRuntimeStackOverflowStatus: a program that runs the runtime's call
// stack out in the interpreter's C code (hashing a million-deep tuple, a
// million chained maps) exits with the stack's status, 119, and --stats
// says stop "stack", for one-shot runs and sessions: it exited with 125, a
// trap.
func TestRuntimeStackOverflowStatus(t *testing.T) {
	for _, mode := range []string{"one-shot", "session"} {
		t.Run(mode, func(t *testing.T) {
			for _, prog := range []string{
				"t = ()\nfor _ in range(10**6):\n    t = (t,)\nhash(t)\n",
				"m = iter([1])\nfor _ in range(10**6):\n    m = map(abs, m)\nnext(m)\n",
			} {
				code, _, errs := fumehood(t, "", runArgs(t, mode, "-c", prog)...)
				assert.Equal(t, exitStack, code, "%q: %s", prog, errs)
				s := statsLine(t, errs)
				assert.Equal(t, "stack", s.Stop, prog)
				assert.Contains(t, errs, "fumehood: "+stackWords, prog)
			}
		})
	}
}
