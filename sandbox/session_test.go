package sandbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// newSession starts a session on the Python guest, closed at the end of the test.
func newSession(t *testing.T, cfg *sandbox.Config) *sandbox.Session {
	t.Helper()
	s, err := sandboxtest.Python(t).NewSession(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// run runs code, requires success and returns the result.
func run(t *testing.T, s *sandbox.Session, code string) *sandbox.Result {
	t.Helper()
	res, err := s.Run(context.Background(), code, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	return res
}

func TestSessionKeepsState(t *testing.T) {
	s := newSession(t, nil)
	res := run(t, s, "x = 41\nprint('set')")
	assert.Equal(t, "set\n", string(res.Stdout))
	assert.False(t, res.HasValue)
	assert.Positive(t, res.FuelUsed)

	res = run(t, s, "x + 1")
	assert.Equal(t, "42", res.Value)
	assert.True(t, res.HasValue)

	// Imports, functions, classes and files last too.
	run(t, s, `import json
def double(v): return 2 * v
class Point:
    def __init__(self, x, y): self.x, self.y = x, y
    def __repr__(self): return f"Point({self.x}, {self.y})"
with open('/work/notes.txt', 'w') as f: f.write('kept')`)
	res = run(t, s, "p = Point(double(x), json.dumps([1]))\np")
	assert.Equal(t, "Point(82, [1])", res.Value)
	res = run(t, s, "open('/work/notes.txt').read()")
	assert.Equal(t, "'kept'", res.Value)
	data, err := s.Files().ReadFile("/work/notes.txt")
	require.NoError(t, err)
	assert.Equal(t, "kept", string(data))

	// None is no value; _ holds the last value, as in the REPL.
	res = run(t, s, "None")
	assert.False(t, res.HasValue)
	assert.Equal(t, "'kept'", run(t, s, "_").Value)
	assert.Equal(t, int64(7), s.Runs())
	assert.Positive(t, s.FuelUsed())
}

// TestSessionLastExpression: a run's value is its last statement's, when
// that is an expression, and compiling the code behaves as compile() does:
// its errors, its warnings, and future imports that last one run.
func TestSessionLastExpression(t *testing.T) {
	s := newSession(t, nil)
	for _, c := range []struct {
		code, value, exc, stderr string
	}{
		{code: "1; 2", value: "2"},
		{code: "x = 3; x * 2", value: "6"},
		{code: "if True:\n    5"},
		{code: "'''doc'''", value: "'doc'"},
		{code: "x = 1  # set\n# the end\n"},
		{code: "5\n# the end", value: "5"},
		{code: ""},
		{code: "[i * x for i in range(3)]", value: "[0, 1, 2]"},
		{code: "(\n  1,\n  2,\n)", value: "(1, 2)"},
		{code: "(lambda: 7)()", value: "7"},
		{code: "x = None\nx is 500", value: "False", stderr: "SyntaxWarning"},
		{code: "a\x00b", exc: "SyntaxError"},
		{code: "1 +", exc: "SyntaxError"},
		{code: "(yield)", exc: "SyntaxError"},
		{code: "del undefined_name", exc: "NameError"},
		{code: "from __future__ import annotations\ndef f(a: undefined): pass\nf.__annotations__", value: "{'a': 'undefined'}"},
		// The future import was the last run's alone.
		{code: "def g(a: int): pass\ng.__annotations__", value: "{'a': <class 'int'>}"},
	} {
		res, err := s.Run(context.Background(), c.code, nil)
		if c.exc != "" {
			var exc *sandbox.Exception
			require.ErrorAs(t, err, &exc, "%q", c.code)
			assert.Equal(t, c.exc, exc.Type, "%q", c.code)
			continue
		}
		require.NoError(t, err, "%q: %s", c.code, res.Stderr)
		assert.Equal(t, c.value != "", res.HasValue, "%q", c.code)
		assert.Equal(t, c.value, res.Value, "%q", c.code)
		if c.stderr != "" {
			assert.Contains(t, string(res.Stderr), c.stderr, "%q", c.code)
		}
	}
}

func TestSessionException(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "def f(): return 1 / 0")
	res, err := s.Run(context.Background(), "y = 5\nf()", nil)
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "ZeroDivisionError", exc.Type)
	assert.Equal(t, "division by zero", exc.Message)
	assert.Contains(t, exc.Traceback, `File "<run-2>", line 2, in <module>`)
	assert.Contains(t, exc.Traceback, "return 1 / 0")
	assert.NotContains(t, exc.Traceback, "_driver")
	assert.Same(t, exc, res.Exception)
	assert.Equal(t, 1, res.ExitCode)
	assert.Contains(t, string(res.Stderr), "ZeroDivisionError: division by zero")
	// What ran before the exception stays.
	assert.Equal(t, "5", run(t, s, "y").Value)

	_, err = s.Run(context.Background(), "def (:", nil)
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "SyntaxError", exc.Type)

	_, err = s.Run(context.Background(), "import json\njson.loads('{')", nil)
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "json.decoder.JSONDecodeError", exc.Type)

	res, err = s.Run(context.Background(), "import sys\nsys.exit(3)", nil)
	var exit *sandbox.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 3, exit.Code)
	assert.Equal(t, 3, res.ExitCode)
	assert.Equal(t, "5", run(t, s, "y").Value, "SystemExit leaves the session running")
}

func TestSessionStopRollsBack(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "x = 1")
	ctx := context.Background()
	for name, tc := range map[string]struct {
		code string
		cfg  *sandbox.RunOptions
		want error
	}{
		"deadline": {"x = 2\nwhile True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 100 * time.Millisecond}}, context.DeadlineExceeded},
		"fuel":     {"x = 3\nwhile True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 50_000_000}}, sandbox.ErrFuelExhausted},
		"output":   {"x = 4\nwhile True: print('y' * 1000)", &sandbox.RunOptions{StopAtOutputLimit: true, Limits: sandbox.Limits{MaxOutput: 10_000}}, sandbox.ErrOutputLimit},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := s.Run(ctx, tc.code, tc.cfg)
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, -1, res.ExitCode)
			// The session is as it was before the stopped run.
			assert.Equal(t, "1", run(t, s, "x").Value)
		})
	}
	// os._exit ends the interpreter: rolled back too.
	_, err := s.Run(ctx, "import os\nx = 9\nos._exit(4)", nil)
	var exit *sandbox.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 4, exit.Code)
	assert.Equal(t, "1", run(t, s, "x").Value)
}

func TestSessionMemoryLimit(t *testing.T) {
	s := newSession(t, &sandbox.Config{Limits: sandbox.Limits{Memory: 64 << 20}})
	res, err := s.Run(context.Background(), "b = bytearray(2**30)", nil)
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "MemoryError", exc.Type)
	assert.ErrorIs(t, err, sandbox.ErrMemoryLimit)
	assert.Equal(t, sandbox.StopMemory, res.Stop)
	assert.True(t, res.MemoryLimitHit)
	assert.LessOrEqual(t, res.PeakMemory, int64(64<<20))
	assert.Equal(t, "2", run(t, s, "1 + 1").Value)
	// Stopped by a limit, the run is rolled back, as for the other limits.
	_, err = s.Run(context.Background(), "kept = 1\nb = bytearray(2**30)", nil)
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
	_, err = s.Run(context.Background(), "kept", nil)
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "NameError", exc.Type)
}

func TestSessionFuelBudget(t *testing.T) {
	s := newSession(t, &sandbox.Config{TotalFuel: 400_000_000})
	for i := 0; ; i++ {
		_, err := s.Run(context.Background(), "sum(range(100_000))", nil)
		if err != nil {
			require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
			break
		}
		require.Less(t, i, 1000, "the session budget never ran out")
	}
	assert.LessOrEqual(t, s.FuelUsed(), int64(400_000_000))
	res, err := s.Run(context.Background(), "1", nil)
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	require.NotNil(t, res, "a limit gives a Result")
	assert.Equal(t, sandbox.StopFuel, res.Stop)
	assert.Equal(t, -1, res.ExitCode)
}

func TestSessionStdinAndEnv(t *testing.T) {
	s := newSession(t, &sandbox.Config{Env: map[string]string{"GREETING": "hi"}})
	res, err := s.Run(context.Background(), "import os, sys\nprint(os.environ['GREETING'], sys.stdin.readline().strip())\nsorted(os.environ)",
		&sandbox.RunOptions{Stdin: strings.NewReader("there\n")})
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "hi there\n", string(res.Stdout))
	assert.Equal(t, "['GREETING']", res.Value, "the base image's PYTHONHASHSEED does not leak")
	// Without Stdin, reading gives end of file, not the next request.
	res = run(t, s, "input.__name__ and sys.stdin.read()")
	assert.Equal(t, "''", res.Value)
}

func TestSessionDeterministic(t *testing.T) {
	cfg := &sandbox.Config{Deterministic: true, Seed: 7}
	code := "import random, time\n(random.random(), time.time())"
	a := run(t, newSession(t, cfg), code)
	b := run(t, newSession(t, cfg), code)
	assert.Equal(t, a.Value, b.Value)
	assert.Equal(t, a.FuelUsed, b.FuelUsed)
	c := run(t, newSession(t, &sandbox.Config{Deterministic: true, Seed: 8}), code)
	assert.NotEqual(t, a.Value, c.Value)
}

func snapshotOf(t *testing.T, s *sandbox.Session) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, s.Snapshot(&buf))
	return buf.Bytes()
}

func resume(t *testing.T, snap []byte, cfg *sandbox.Config) *sandbox.Session {
	t.Helper()
	s, err := sandboxtest.Python(t).ResumeSession(context.Background(), bytes.NewReader(snap), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSessionSnapshotChain(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "import collections\nclass C:\n    n = 0\ncounts = collections.Counter()\nopen('/work/log', 'w').write('0')")
	for i := 1; i <= 3; i++ {
		snap := snapshotOf(t, s)
		assert.Less(t, len(snap), 2<<20)
		s = resume(t, snap, nil)
		run(t, s, "C.n += 1\ncounts['x'] += 1\nopen('/work/log', 'a').write(str(C.n))")
	}
	assert.Equal(t, "(3, 3, '0123')", run(t, s, "(C.n, counts['x'], open('/work/log').read())").Value)
	assert.Equal(t, int64(4+1), s.Runs())
}

func TestSessionForksDiverge(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "import random\nitems = [1]\nopen('/work/f', 'w').write('base')")
	a, err := s.Fork(context.Background())
	require.NoError(t, err)
	defer a.Close()
	b, err := s.Fork(context.Background())
	require.NoError(t, err)
	defer b.Close()
	run(t, a, "items.append('a')\nopen('/work/f', 'w').write('a')")
	run(t, b, "items.append('b')")
	assert.Equal(t, "([1, 'a'], 'a')", run(t, a, "items, open('/work/f').read()").Value)
	assert.Equal(t, "([1, 'b'], 'base')", run(t, b, "items, open('/work/f').read()").Value)
	assert.Equal(t, "([1], 'base')", run(t, s, "items, open('/work/f').read()").Value)
	// Forks are reseeded: their random streams differ.
	assert.NotEqual(t, run(t, a, "random.random()").Value, run(t, b, "random.random()").Value)
}

func TestSessionVolumesAndLayout(t *testing.T) {
	vol := afero.NewMemMapFs()
	cfg := &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: vol}}}
	s := newSession(t, cfg)
	run(t, s, "open('/data/v', 'w').write('volume')\nopen('/work/r', 'w').write('root')")
	snap := snapshotOf(t, s)

	// The volume is not in the snapshot: the resumed session sees the
	// volume it is given.
	r := resume(t, snap, cfg)
	assert.Equal(t, "('volume', 'root')", run(t, r, "open('/data/v').read(), open('/work/r').read()").Value)

	g := sandboxtest.Python(t)
	for name, other := range map[string]*sandbox.Config{
		"no volume":  nil,
		"read-only":  {Mounts: []sandbox.Mount{{Path: "/data", FS: vol, ReadOnly: true}}},
		"other path": {Mounts: []sandbox.Mount{{Path: "/store", FS: vol}}},
		"root mount": {Mounts: []sandbox.Mount{{Path: "/", FS: afero.NewMemMapFs()}, {Path: "/data", FS: vol}}},
	} {
		_, err := g.ResumeSession(context.Background(), bytes.NewReader(snap), other)
		assert.ErrorIs(t, err, sandbox.ErrSnapshotLayout, name)
	}
}

func TestSessionResumeRejects(t *testing.T) {
	g := sandboxtest.Python(t)
	s := newSession(t, nil)
	run(t, s, "x = 1")
	snap := snapshotOf(t, s)
	check := func(name string, data []byte, want error) {
		t.Helper()
		_, err := g.ResumeSession(context.Background(), bytes.NewReader(data), nil)
		require.Error(t, err, name)
		assert.ErrorIs(t, err, want, name)
		for _, other := range []error{sandbox.ErrSnapshotFormat, sandbox.ErrSnapshotVersion, sandbox.ErrSnapshotCorrupt, sandbox.ErrSnapshotTooLarge, sandbox.ErrSnapshotGuest, sandbox.ErrSnapshotLayout} {
			if other != want {
				assert.False(t, errors.Is(err, other), "%s: %v also matches %v", name, err, other)
			}
		}
	}
	check("empty", nil, sandbox.ErrSnapshotCorrupt)
	check("text", []byte("hello, this is not a snapshot at all"), sandbox.ErrSnapshotFormat)
	for _, n := range []int{5, 20, 100, len(snap) / 2, len(snap) - 1} {
		check("truncated", snap[:n], sandbox.ErrSnapshotCorrupt)
	}
	for _, off := range []int{30, len(snap) / 3, len(snap) - 40, len(snap) - 1} {
		bad := bytes.Clone(snap)
		bad[off] ^= 0x40
		check("flipped bit", bad, sandbox.ErrSnapshotCorrupt)
	}
	bad := bytes.Clone(snap)
	bad[12] = 99
	check("version", bad, sandbox.ErrSnapshotVersion)

	// A snapshot from another guest build: the one-shot build cannot
	// resume, so take the ID check through a rewritten header.
	foreign := rewriteHeader(t, snap, func(h string) string {
		return strings.Replace(h, `"guest":"`, `"guest":"00`, 1)
	})
	check("foreign guest", foreign, sandbox.ErrSnapshotGuest)
	foreign = rewriteHeader(t, snap, func(h string) string {
		return strings.Replace(h, `"base":"`, `"base":"00`, 1)
	})
	check("foreign base", foreign, sandbox.ErrSnapshotGuest)

	_, err := sandboxtest.Python(t).ResumeSession(context.Background(), bytes.NewReader(snap), nil)
	assert.NoError(t, err, "a snapshot resumes on another Guest of the same build")

	// A valid snapshot that needs more than this session allows.
	_, err = g.ResumeSession(context.Background(), bytes.NewReader(snap), &sandbox.Config{Limits: sandbox.Limits{Memory: 4 << 20}})
	assert.ErrorIs(t, err, sandbox.ErrSnapshotTooLarge)
	assert.NotErrorIs(t, err, sandbox.ErrSnapshotCorrupt)
}

// rewriteHeader edits a snapshot's JSON header and fixes its checksum, as
// a snapshot written by another build would be: valid, but not ours.
func rewriteHeader(t *testing.T, snap []byte, edit func(string) string) []byte {
	t.Helper()
	hlen := binary.LittleEndian.Uint32(snap[16:])
	header := edit(string(snap[20 : 20+hlen]))
	var out []byte
	out = append(out, snap[:16]...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(header)))
	out = append(out, header...)
	out = append(out, snap[20+hlen:len(snap)-sha256.Size]...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...)
}

func TestSessionStopWithFileOpenedByTheRun(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "x = 1")
	_, err := s.Run(context.Background(), "f = open('/tmp/new', 'w')\nx = 2\nwhile True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 50 * time.Millisecond}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, "(1, True)", run(t, s, "import os\nx, os.path.exists('/tmp/new')").Value, "rolled back; the file the run created stays")
	require.NoError(t, s.Snapshot(&bytes.Buffer{}), "no handle survives the rollback")
}

func TestSessionManyRuns(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "n = 0")
	for i := 0; i < 100; i++ {
		run(t, s, "n += 1")
	}
	assert.Equal(t, "100", run(t, s, "n").Value)
	assert.Equal(t, int64(102), s.Runs())
}

func TestSessionHibernate(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "import json\nx = [1, 2, 3]\nopen('/work/f', 'w').write('kept')")
	require.NoError(t, s.Hibernate())
	require.NoError(t, s.Hibernate(), "twice is fine")
	assert.Equal(t, "([1, 2, 3], 'kept', '[1]')", run(t, s, "x, open('/work/f').read(), json.dumps([1])").Value)
	require.NoError(t, s.Hibernate())
	f, err := s.Fork(context.Background())
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, "[1, 2, 3]", run(t, f, "x").Value)
	var snap bytes.Buffer
	require.NoError(t, s.Snapshot(&snap))
	assert.Equal(t, "[1, 2, 3]", run(t, resume(t, snap.Bytes(), nil), "x").Value, "a hibernated session's snapshot")

	run(t, s, "held = open('/work/f')")
	require.NoError(t, s.Hibernate(), "open files are carried")
	assert.Equal(t, "'kept'", run(t, s, "held.read()").Value)
	run(t, s, "held.close()")
	require.NoError(t, s.Hibernate())
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.Hibernate(), sandbox.ErrClosed)
}

func TestSessionCloseStopsARun(t *testing.T) {
	s := newSession(t, nil)
	started := make(chan struct{})
	var once sync.Once
	out := writerFunc(func(p []byte) (int, error) {
		once.Do(func() { close(started) })
		return len(p), nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(context.Background(), "print('looping')\nwhile True: pass", &sandbox.RunOptions{Stdout: out})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the run did not start")
	}
	require.NoError(t, s.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not stop the run")
	}
	_, err := s.Run(context.Background(), "1", nil)
	assert.ErrorIs(t, err, sandbox.ErrClosed)
}

// writerFunc is an io.Writer made of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestSessionControlDirectoryCannotBeJammed(t *testing.T) {
	s := newSession(t, nil)
	// Fill the driver's directory up to its quota of files.
	res, _ := s.Run(context.Background(), "import os\nfor i in range(100):\n    try: open('/.fumehood/junk%d' % i, 'w').close()\n    except OSError: break", nil)
	require.NotNil(t, res)
	assert.Equal(t, "2", run(t, s, "1 + 1").Value)
	assert.Equal(t, "3", run(t, s, "1 + 2").Value)
}

// TestSessionConcurrentUse calls one session from several goroutines: the
// calls are serialized, none is lost, and forks taken meanwhile each see a
// consistent state. `make race` runs it under the race detector.
func TestSessionConcurrentUse(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "n = 0")
	ctx := context.Background()
	const workers, runs = 4, 10
	errs := make(chan error, workers*runs+workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range runs {
				if _, err := s.Run(ctx, "n += 1", nil); err != nil {
					errs <- err
				}
			}
			f, err := s.Fork(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			res, err := f.Run(ctx, "0 <= n <= 40", nil)
			if err != nil || res.Value != "True" {
				errs <- fmt.Errorf("fork: %v %v", err, res)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Equal(t, "40", run(t, s, "n").Value)
}

// TestSessionRequestsOfCodeAlone: the runs after a session's first send
// their code alone (the driver reads it without JSON): code that starts
// as JSON does, lines and a last expression, bytes that are not UTF-8
// (sent in a JSON request, each bad byte a surrogate escape, as python -c
// takes them: compiling them fails as it does there) and NUL, and the
// run's number in tracebacks, as the first run's request does.
func TestSessionRequestsOfCodeAlone(t *testing.T) {
	ctx := context.Background()
	s := newSession(t, nil)
	run(t, s, "x = 0")
	assert.Equal(t, "{1: 2}", run(t, s, "{1: 2}").Value)
	assert.Equal(t, "3", run(t, s, "a = 1\nb = 2\n\na + b").Value)
	_, err := s.Run(ctx, "'\xff\xfe'", nil)
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "UnicodeEncodeError", exc.Type)
	assert.Contains(t, exc.Message, "surrogates not allowed")
	_, err = s.Run(ctx, "x = 1\x00", nil)
	require.ErrorAs(t, err, &exc)
	assert.Contains(t, exc.Message, "null bytes")
	_, err = s.Run(ctx, "pass\n1 / 0", nil)
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "ZeroDivisionError", exc.Type)
	assert.Contains(t, exc.Traceback, `File "<run-6>", line 2, in <module>`)
	assert.Equal(t, "0", run(t, s, "x").Value, "the session went on, x as it was")
}

// TestSessionResumeStreams resumes a session holding 48 MiB of random
// bytes in memory and a 16 MiB random file in its root (a snapshot of
// about 64 MB, which does not compress): the resume decodes as it reads,
// the pages straight into the session's checkpoint and the file into its
// root, so what it allocates on Go's heap is the state it keeps plus a
// few MiB, not the encoded snapshot and the decoded one on top (the
// linear memory is mapped, outside the heap): 1.4 times the snapshot's
// size. It used to allocate 7.3 times: a 337 MB snapshot took the command
// line to 1.8 GB of resident memory.
func TestSessionResumeStreams(t *testing.T) {
	g := sandboxtest.Python(t)
	ctx := context.Background()
	s := newSession(t, nil)
	run(t, s, `import os
blob = os.urandom(48 << 20)
with open('/work/f', 'wb') as f:
    for _ in range(16):
        f.write(os.urandom(1 << 20))`)
	snap := snapshotOf(t, s)
	require.NoError(t, s.Close())

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := g.ResumeSession(ctx, bytes.NewReader(snap), nil)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	defer r.Close()
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("resuming a %d-byte snapshot allocated %d bytes (%.2f times)", len(snap), alloc, float64(alloc)/float64(len(snap)))
	// The checkpoint's pages (48 MiB and the interpreter's), the file
	// (made room for, then copied in), the decoder.
	assert.Less(t, alloc, uint64(len(snap))*3/2)
	assert.Equal(t, "(50331648, 16777216)", run(t, r, "import os\nlen(blob), os.path.getsize('/work/f')").Value)
}
