package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

func TestPythonPrintAndStdlib(t *testing.T) {
	py := sandboxtest.Python(t)
	res, err := py.Run(context.Background(), `
import json, re, decimal, datetime, hashlib, sqlite3
print("hello from", "python")
print(json.dumps({"a": [1, 2]}, sort_keys=True))
print(re.sub(r"\d+", "#", "a1b22c333"))
print(decimal.Decimal("0.1") + decimal.Decimal("0.2"))
print(datetime.date(2024, 2, 28) + datetime.timedelta(days=1))
print(hashlib.sha256(b"fumehood").hexdigest())
db = sqlite3.connect(":memory:")
db.execute("create table t (x)")
db.executemany("insert into t values (?)", [(1,), (2,), (3,)])
print(db.execute("select sum(x) from t").fetchone()[0])
`, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, strings.Join([]string{
		"hello from python",
		`{"a": [1, 2]}`,
		"a#b#c#",
		"0.3",
		"2024-02-29",
		"5a74b9e40d7f8a0ebf6f5895ea3821c718ed09db7844c1dbad6027f99c11c186",
		"6",
	}, "\n")+"\n", string(res.Stdout))
	assert.Empty(t, res.Stderr)
	assert.Positive(t, res.Duration)
}

func TestPythonExceptionExitsOne(t *testing.T) {
	py := sandboxtest.Python(t)
	res, err := py.Run(context.Background(), "print('before')\n{}['missing']", nil)
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "KeyError", exc.Type)
	assert.Equal(t, "'missing'", exc.Message)
	assert.True(t, strings.HasPrefix(exc.Traceback, "Traceback (most recent call last):\n  File \"<string>\", line 2, in <module>\n    {}['missing']\n"), exc.Traceback)
	assert.True(t, strings.HasSuffix(exc.Traceback, "\nKeyError: 'missing'\n"), exc.Traceback)
	assert.False(t, exc.Truncated)
	assert.Same(t, exc, res.Exception)
	assert.Equal(t, 1, res.ExitCode)
	assert.Equal(t, sandbox.StopExit, res.Stop)
	assert.Equal(t, "before\n", string(res.Stdout), "output before the exception is kept")
	assert.Contains(t, string(res.Stderr), "Traceback (most recent call last)")
	assert.Contains(t, string(res.Stderr), "KeyError: 'missing'")
	assert.Contains(t, string(res.Stderr), exc.Traceback, "the traceback is on stderr too, as python prints it")
}

func TestPythonSystemExit(t *testing.T) {
	py := sandboxtest.Python(t)
	res, err := py.Run(context.Background(), "import sys; sys.exit(3)", nil)
	var exit *sandbox.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 3, exit.Code)
	assert.Equal(t, 3, res.ExitCode)

	res, err = py.Run(context.Background(), "raise SystemExit(0)", nil)
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
}

func TestPythonStdinArgsEnv(t *testing.T) {
	s, err := sandboxtest.Python(t).NewSandbox(&sandbox.Config{Env: map[string]string{"GREETING": "hi"}})
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Run(context.Background(), `
import sys, os
data = sys.stdin.read()
print(data.upper(), end="")
print(sys.argv[1:])
print(sorted(os.environ.items()))
`, &sandbox.RunOptions{Stdin: strings.NewReader("line one\nline two\n")}, "a", "b c")
	require.NoError(t, err)
	assert.Equal(t, "LINE ONE\nLINE TWO\n['a', 'b c']\n[('GREETING', 'hi')]\n", string(res.Stdout))
}

func TestPythonCleanRoomDefaults(t *testing.T) {
	py := sandboxtest.Python(t)
	res, err := py.Run(context.Background(), `
import os, sys, socket
print(dict(os.environ))
print(repr(sys.stdin.read()))
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    print("socket created")
except OSError:
    print("no sockets")
try:
    socket.create_connection(("127.0.0.1", 80), timeout=1)
    print("connected")
except Exception:
    print("no network")
`, nil)
	require.NoError(t, err)
	assert.Equal(t, "{}\n''\nno sockets\nno network\n", string(res.Stdout))
}

func TestDeadlineStopsInfiniteLoop(t *testing.T) {
	py := sandboxtest.Python(t)
	res, err := py.Run(context.Background(), "print('started')\nwhile True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 2 * time.Second}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, -1, res.ExitCode)
	assert.Equal(t, "started\n", string(res.Stdout), "output before the stop is kept")

	// The compiled guest is still healthy.
	res, err = py.Run(context.Background(), "print(2 + 2)", nil)
	require.NoError(t, err)
	assert.Equal(t, "4\n", string(res.Stdout))
}

func TestCancelStopsRun(t *testing.T) {
	py := sandboxtest.Python(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err := py.Run(ctx, "while True: pass", nil)
	require.ErrorIs(t, err, context.Canceled)

	_, err = py.Run(ctx, "print(1)", nil)
	assert.ErrorIs(t, err, context.Canceled, "a done context runs nothing")
}

func TestConcurrentRunsOnOneGuest(t *testing.T) {
	py := sandboxtest.Python(t)
	const n = 8
	var wg sync.WaitGroup
	outs := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := py.Run(context.Background(), fmt.Sprintf(`
import sys
total = sum(range(%d))
print("run", %d, total)
print("err", %d, file=sys.stderr)
`, (i+1)*1000, i, i), nil)
			errs[i] = err
			if err == nil {
				outs[i] = string(res.Stdout) + "|" + string(res.Stderr)
			}
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		m := (i + 1) * 1000
		assert.Equal(t, fmt.Sprintf("run %d %d\n|err %d\n", i, m*(m-1)/2, i), outs[i])
	}
}

func TestOutputBoundAndStreaming(t *testing.T) {
	py := sandboxtest.Python(t)
	var streamed bytes.Buffer
	res, err := py.Run(context.Background(), "import sys\nsys.stdout.write('x' * 5000)\nprint('done', file=sys.stderr)",
		&sandbox.RunOptions{Stdout: &streamed, Limits: sandbox.Limits{MaxOutput: 1000}})
	require.NoError(t, err)
	assert.Len(t, res.Stdout, 1000)
	assert.True(t, res.StdoutTruncated)
	assert.False(t, res.StderrTruncated)
	assert.Equal(t, "done\n", string(res.Stderr))
	assert.Equal(t, strings.Repeat("x", 5000), streamed.String(), "the stream sees all of it")
	assert.Equal(t, strings.Repeat("x", 1000), string(res.Stdout), "under 1 KiB, the start only")
}

func TestRunRejectsBadInput(t *testing.T) {
	py := sandboxtest.Python(t)
	_, err := py.Run(context.Background(), "print(1)\x00", nil)
	assert.Error(t, err)
	_, err = py.NewSandbox(&sandbox.Config{Env: map[string]string{"A=B": "x"}})
	assert.Error(t, err)
	s, err := py.NewSandbox(nil)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Run(context.Background(), "print(1)", nil, "nul\x00")
	assert.Error(t, err)
	_, err = py.Run(context.Background(), "print(1)", &sandbox.RunOptions{Limits: sandbox.Limits{MaxOutput: -1}})
	assert.Error(t, err)
}

func TestPythonVersionThroughExec(t *testing.T) {
	py := sandboxtest.Python(t)
	require.True(t, py.IsPython())
	res, err := py.Exec(context.Background(), nil, "-c", "import platform; print(platform.python_version())")
	require.NoError(t, err)
	assert.Equal(t, py.Python().Version+"\n", string(res.Stdout))
}

// writes records each Write it gets.
type writes struct{ got []string }

func (w *writes) Write(p []byte) (int, error) {
	w.got = append(w.got, string(p))
	return len(p), nil
}

// TestStreamsByLine: a caller's stream gets the output a line at a time
// (print writes a line in pieces), an unended line when the guest sleeps
// (progress dots show) and at the end, one-shot and in a session.
func TestStreamsByLine(t *testing.T) {
	code := `import sys, time
for i in range(3):
    print("line", i)
print("working", end="")
for _ in range(2):
    sys.stdout.write(".")
    time.sleep(0.01)
print(" done")
sys.stdout.write("50%\r100%\r")
sys.stdout.write("no newline at the end")`
	want := []string{"line 0\n", "line 1\n", "line 2\n", "working.", ".", " done\n", "50%\r100%\r", "no newline at the end"}
	py := sandboxtest.Python(t)
	var w writes
	_, err := py.Run(context.Background(), code, &sandbox.RunOptions{Stdout: &w})
	require.NoError(t, err)
	assert.Equal(t, want, w.got)

	s, err := sandboxtest.PythonSessions(t).NewSession(context.Background(), nil)
	require.NoError(t, err)
	defer s.Close()
	w = writes{}
	_, err = s.Run(context.Background(), code, &sandbox.RunOptions{Stdout: &w})
	require.NoError(t, err)
	assert.Equal(t, want, w.got)
}

// TestOnRunObserves: Options.OnRun is told of every run of the guest,
// one-shot and in a session, with the Result and error the caller gets.
func TestOnRunObserves(t *testing.T) {
	sandboxtest.PythonSessions(t) // skips where the npm guest has no session build
	var events []sandbox.RunEvent
	py, err := sandbox.CompilePython(context.Background(), &sandbox.Options{Sessions: true,
		OnRun: func(e sandbox.RunEvent) { events = append(events, e) }})
	require.NoError(t, err)
	defer py.Close()
	res, err := py.Run(context.Background(), "print(1)", nil)
	require.NoError(t, err)
	s, err := py.NewSession(context.Background(), nil)
	require.NoError(t, err)
	defer s.Close()
	_, serr := s.Run(context.Background(), "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 1e6}})
	require.ErrorIs(t, serr, sandbox.ErrFuelExhausted)
	require.Len(t, events, 2)
	assert.False(t, events[0].Session)
	assert.Same(t, res, events[0].Result)
	assert.NoError(t, events[0].Err)
	assert.True(t, events[1].Session)
	assert.Equal(t, sandbox.StopFuel, events[1].Result.Stop)
	assert.ErrorIs(t, events[1].Err, sandbox.ErrFuelExhausted)
}
