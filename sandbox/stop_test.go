package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// fakeDeadline is a guest passing its own exit for the deadline: the CLI's
// status for it and the CLI's words.
const fakeDeadline = "import sys\nsys.stderr.write('fumehood: deadline exceeded\\n')\nsys.exit(124)"

// TestResultStopOneShot checks that Result.Stop says what ended a one-shot
// run, from what the host recorded: each limit, an exit, a trap, and exits
// that pose as limits.
func TestResultStopOneShot(t *testing.T) {
	py := sandboxtest.Python(t)
	for _, tc := range []struct {
		name   string
		cancel bool // cancel the context after a moment
		code   string
		cfg    *sandbox.RunOptions
		stop   sandbox.StopReason
		err    error // the error the run matches; nil for none
		exit   int
	}{
		{"exit 0", false, "print('hi')", nil, sandbox.StopExit, nil, 0},
		{"exit 3", false, "import sys\nsys.exit(3)", nil, sandbox.StopExit, &sandbox.ExitError{Code: 3}, 3},
		{"exception", false, "1/0", nil, sandbox.StopExit, &sandbox.Exception{Type: "ZeroDivisionError", Message: "division by zero"}, 1},
		{"fuel", false, "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 50_000_000}}, sandbox.StopFuel, sandbox.ErrFuelExhausted, -1},
		{"deadline", false, "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 200 * time.Millisecond}}, sandbox.StopDeadline, context.DeadlineExceeded, -1},
		{"canceled", true, "while True: pass", nil, sandbox.StopCanceled, context.Canceled, -1},
		{"memory", false, "x = bytearray(2**30)", &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 64 << 20}}, sandbox.StopMemory, sandbox.ErrMemoryLimit, 1},
		{"output", false, "while True: print('spam')", &sandbox.RunOptions{StopAtOutputLimit: true, Limits: sandbox.Limits{MaxOutput: 1000}}, sandbox.StopOutput, sandbox.ErrOutputLimit, -1},
		// The CLI's status and words for a deadline, from the guest.
		{"fake deadline", false, fakeDeadline, nil, sandbox.StopExit, &sandbox.ExitError{Code: 124}, 124},
		// wazero's exit codes for a closed context, through proc_exit:
		// their low 8 bits, as a POSIX parent sees them.
		{"fake wazero deadline", false, "import os\nos._exit(-268435457)", nil, sandbox.StopExit, &sandbox.ExitError{Code: 255}, 255},
		{"fake wazero cancel", false, "import os\nos._exit(-1)", nil, sandbox.StopExit, &sandbox.ExitError{Code: 255}, 255},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				time.AfterFunc(200*time.Millisecond, cancel)
			}
			res, err := py.Run(ctx, tc.code, tc.cfg)
			require.NotNil(t, res, "error: %v", err)
			assert.Equal(t, tc.stop, res.Stop, "error: %v", err)
			assert.Equal(t, tc.exit, res.ExitCode)
			var exit *sandbox.ExitError
			var exc *sandbox.Exception
			switch want := tc.err.(type) {
			case nil:
				require.NoError(t, err)
			case *sandbox.ExitError:
				require.ErrorAs(t, err, &exit)
				assert.Equal(t, want.Code, exit.Code)
			case *sandbox.Exception:
				require.ErrorAs(t, err, &exc)
				assert.Equal(t, want.Type, exc.Type)
				assert.Equal(t, want.Message, exc.Message)
				assert.Same(t, exc, res.Exception)
			default:
				require.ErrorIs(t, err, want)
			}
			if tc.stop == sandbox.StopExit {
				for _, limit := range []error{context.DeadlineExceeded, context.Canceled, sandbox.ErrFuelExhausted, sandbox.ErrMemoryLimit, sandbox.ErrOutputLimit} {
					assert.NotErrorIs(t, err, limit, "the guest's exit passes for a limit")
				}
			}
		})
	}

	// A trap: unreachable.
	g, err := sandbox.Compile(context.Background(), hostileModule{memPages: 1, body: []byte{0x00}}.wasm(), &sandbox.Options{CacheDir: t.TempDir()})
	require.NoError(t, err)
	defer g.Close()
	res, err := g.Exec(context.Background(), nil)
	var trap *sandbox.TrapError
	require.ErrorAs(t, err, &trap)
	assert.Equal(t, sandbox.StopTrap, res.Stop)
	assert.Equal(t, -1, res.ExitCode)
}

// TestResultStopSession checks Result.Stop for session runs.
func TestResultStopSession(t *testing.T) {
	s := newSession(t, &sandbox.Config{TotalFuel: 200_000_000_000})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		code string
		cfg  *sandbox.RunOptions
		stop sandbox.StopReason
		exit int
	}{
		{"value", "1 + 1", nil, sandbox.StopExit, 0},
		{"exception", "1/0", nil, sandbox.StopExit, 1},
		{"sys.exit", "import sys\nsys.exit(5)", nil, sandbox.StopExit, 5},
		{"fake deadline", fakeDeadline, nil, sandbox.StopExit, 124},
		{"fake wazero cancel", "import os\nos._exit(-1)", nil, sandbox.StopExit, 255},
		{"fuel", "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 50_000_000}}, sandbox.StopFuel, -1},
		{"deadline", "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 200 * time.Millisecond}}, sandbox.StopDeadline, -1},
		{"output", "while True: print('spam')", &sandbox.RunOptions{StopAtOutputLimit: true, Limits: sandbox.Limits{MaxOutput: 1000}}, sandbox.StopOutput, -1},
		// As in a one-shot run: an exception after a refused allocation.
		{"memory", "x = bytearray(2**30)", &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 64 << 20}}, sandbox.StopMemory, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.Run(ctx, tc.code, tc.cfg)
			require.NotNil(t, res, "error: %v", err)
			assert.Equal(t, tc.stop, res.Stop, "error: %v", err)
			assert.Equal(t, tc.exit, res.ExitCode)
			if tc.stop == sandbox.StopExit {
				assert.NotErrorIs(t, err, context.DeadlineExceeded)
				assert.NotErrorIs(t, err, context.Canceled)
			}
		})
	}
	// The session's own fuel budget.
	for i := 0; ; i++ {
		res, err := s.Run(ctx, "sum(range(1_000_000))", nil)
		if err != nil {
			require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
			assert.Equal(t, sandbox.StopFuel, res.Stop)
			break
		}
		assert.Equal(t, sandbox.StopExit, res.Stop)
		require.Less(t, i, 1000, "the session budget never ran out")
	}
	res, err := s.Run(ctx, "1", nil)
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	assert.Equal(t, sandbox.StopFuel, res.Stop)
}

func TestStopReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for s := sandbox.StopExit; s <= sandbox.StopError; s++ {
		assert.False(t, seen[s.String()], "%d and another reason are both %q", s, s)
		seen[s.String()] = true
	}
	assert.Equal(t, "deadline", sandbox.StopDeadline.String())
	assert.Equal(t, "StopReason(99)", sandbox.StopReason(99).String())
	b, err := json.Marshal(struct{ Stop sandbox.StopReason }{sandbox.StopFuel})
	require.NoError(t, err)
	assert.JSONEq(t, `{"Stop":"fuel"}`, string(b))
}

// exitStatuses are SystemExit codes outside 0-255 and the status python
// exits with for each on POSIX (`python3 -c 'import sys; sys.exit(N)';
// echo $?`): the low 8 bits of C's int of the code, -1 (255) for a code
// past a long long.
var exitStatuses = []struct {
	code   string
	status int
}{
	{"2**70", 255},
	{"-1", 255},
	{"-2**70", 255},
	{"256", 0},
	{"1000", 232},
	{"10**5000", 255}, // past the 4,300 digits str() gives an int
}

// TestExitStatusAsPOSIX: a SystemExit code outside 0-255 gives the status
// python gives natively, as an *ExitError (none for 0) with StopExit, in
// one-shot runs and sessions: never a trap (sys.exit(2**70) made the
// outcome undecodable) nor -1, the status of a run stopped before it
// exited (sys.exit(-1) gave it).
func TestExitStatusAsPOSIX(t *testing.T) {
	oneShotAndSession(t, func(t *testing.T, run func(code string) (*sandbox.Result, error)) {
		for _, tc := range exitStatuses {
			what := "sys.exit(" + tc.code + ")"
			res, err := run("import sys\nsys.exit(" + tc.code + ")")
			require.NotNil(t, res, "%s: %v", what, err)
			assert.Equal(t, sandbox.StopExit, res.Stop, "%s: %v", what, err)
			assert.Equal(t, tc.status, res.ExitCode, what)
			var trap *sandbox.TrapError
			assert.False(t, errors.As(err, &trap), "%s: %v", what, err)
			if tc.status == 0 {
				assert.NoError(t, err, what)
				continue
			}
			var exit *sandbox.ExitError
			if assert.ErrorAs(t, err, &exit, what) {
				assert.Equal(t, tc.status, exit.Code, what)
			}
		}
	})
}

// oneShotAndSession runs check twice, as subtests: with one-shot runs of
// the tests' Python guest, then with runs of one session, which must go on
// from its state before them afterwards.
func oneShotAndSession(t *testing.T, check func(t *testing.T, run func(code string) (*sandbox.Result, error))) {
	ctx := context.Background()
	t.Run("one-shot", func(t *testing.T) {
		py := sandboxtest.Python(t)
		check(t, func(code string) (*sandbox.Result, error) { return py.Run(ctx, code, nil) })
	})
	t.Run("session", func(t *testing.T) {
		s := newSession(t, nil)
		run(t, s, "x = 41")
		check(t, func(code string) (*sandbox.Result, error) { return s.Run(ctx, code, nil) })
		assert.Equal(t, "42", run(t, s, "x + 1").Value, "the session goes on")
	})
}
