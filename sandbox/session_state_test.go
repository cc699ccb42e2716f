package sandbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// The session's environment is exactly the caller's: the variables the
// base image was built with (PYTHONHASHSEED=0) are gone, from os.environ,
// posix.environ and getenv alike, even when the caller's is empty.
func TestSessionEnvIsTheCallers(t *testing.T) {
	const code = "import os, posix\n(dict(os.environ), posix.environ, os.getenv('PYTHONHASHSEED'))"
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"nil":   {nil, "({}, {}, None)"},
		"empty": {map[string]string{}, "({}, {}, None)"},
		"one":   {map[string]string{"A": "1"}, "({'A': '1'}, {b'A': b'1'}, None)"},
		"own":   {map[string]string{"PYTHONHASHSEED": "5"}, "({'PYTHONHASHSEED': '5'}, {b'PYTHONHASHSEED': b'5'}, '5')"},
	} {
		s := newSession(t, &sandbox.Config{Env: tc.env})
		assert.Equal(t, tc.want, run(t, s, code).Value, name)
		// Forks and resumed sessions keep it.
		f, err := s.Fork(context.Background())
		require.NoError(t, err)
		assert.Equal(t, tc.want, run(t, f, code).Value, name+": fork")
		f.Close()
		assert.Equal(t, tc.want, run(t, resume(t, snapshotOf(t, s), nil), code).Value, name+": resumed")
	}
}

// The environment as the code left it is the session's state: a fork and
// a resumed session have it, as they have the code's variables (the
// caller's is sent only to a new session).
func TestSessionEnvChangedByTheCode(t *testing.T) {
	s := newSession(t, &sandbox.Config{Env: map[string]string{"A": "1"}})
	run(t, s, "import os\nos.environ['A'] = '9'")
	const code = "import os, posix\n(dict(os.environ), posix.environ)"
	assert.Equal(t, "({'A': '9'}, {b'A': b'9'})", run(t, s, code).Value)
	f, err := s.Fork(context.Background())
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, "({'A': '9'}, {b'A': b'9'})", run(t, f, code).Value)
	assert.Equal(t, "({'A': '9'}, {b'A': b'9'})", run(t, resume(t, snapshotOf(t, s), nil), code).Value)
}

// randomState is what repeats in a session whose random state is not
// reseeded: tempfile's name sequence and the random module.
const randomState = "import tempfile, random, os\n(tempfile.mktemp(), random.random(), os.urandom(4).hex())"

// Forks and resumed sessions draw new random state: tempfile's names, the
// random module (whether or not the session imported it yet).
func TestSessionReseedsForksAndResumes(t *testing.T) {
	s := newSession(t, nil)
	first := run(t, s, randomState).Value // tempfile's sequence exists now
	fork := func() string {
		f, err := s.Fork(context.Background())
		require.NoError(t, err)
		defer f.Close()
		return run(t, f, randomState).Value
	}
	a, b := fork(), fork()
	next := run(t, s, randomState).Value
	assert.NotEqual(t, a, b, "two forks")
	assert.NotEqual(t, a, next, "a fork and its parent")
	assertAllDiffer(t, first, a, b, next)

	snap := snapshotOf(t, s)
	r1 := run(t, resume(t, snap, nil), randomState).Value
	r2 := run(t, resume(t, snap, nil), randomState).Value
	assertAllDiffer(t, r1, r2, first, next)

	// A fresh session too, though every one starts from the same image.
	assertAllDiffer(t, run(t, newSession(t, nil), randomState).Value, run(t, newSession(t, nil), randomState).Value)
}

// assertAllDiffer checks that no two of the values (reprs of tuples of
// random things) have any element in common.
func assertAllDiffer(t *testing.T, values ...string) {
	t.Helper()
	seen := map[string]int{}
	for i, v := range values {
		for _, part := range strings.Split(strings.Trim(v, "()"), ", ") {
			if j, ok := seen[part]; ok {
				assert.Fail(t, "random state repeats", "%s in values %d and %d: %q", part, j, i, values)
			}
			seen[part] = i
		}
	}
}

// In deterministic mode, forks are reseeded too, each from the session's
// seed and its number among the session's forks: two forks differ, and
// the same session forked the same way gives the same values. A snapshot
// resumed twice gives the same values twice.
func TestSessionDeterministicForks(t *testing.T) {
	cfg := &sandbox.Config{Deterministic: true, Seed: 3}
	forks := func() (string, string, string) {
		s := newSession(t, cfg)
		run(t, s, randomState)
		fork := func() string {
			f, err := s.Fork(context.Background())
			require.NoError(t, err)
			defer f.Close()
			return run(t, f, randomState).Value
		}
		a, b := fork(), fork()
		return a, b, run(t, s, randomState).Value
	}
	a1, b1, p1 := forks()
	a2, b2, p2 := forks()
	assert.Equal(t, []string{a1, b1, p1}, []string{a2, b2, p2}, "deterministic")
	assertAllDiffer(t, a1, b1, p1)

	s := newSession(t, cfg)
	start := run(t, s, randomState).Value
	snap := snapshotOf(t, s)
	r1 := run(t, resume(t, snap, nil), randomState).Value
	r2 := run(t, resume(t, snap, nil), randomState).Value
	assert.Equal(t, r1, r2, "deterministic")
	assertAllDiffer(t, start, r1)
}

// A crafted snapshot whose header holds ten million empty arguments (30
// MB) is refused as corrupt before it is parsed or even read whole.
func TestResumeRefusesHugeHeader(t *testing.T) {
	g := sandboxtest.Python(t)
	header := `{"guest":"g","base":"b","memory_size":65536,"asyncify_buffer":8,"mounts":[{"path":"/","in_memory":true}],"args":[` +
		strings.Repeat(`"",`, 10_000_000) + `""]}`
	var b bytes.Buffer
	b.WriteString("FUMEHOODSNAP")
	b.Write(binary.LittleEndian.AppendUint32(nil, 1))
	b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(header))))
	b.WriteString(header)
	b.Write(binary.LittleEndian.AppendUint64(nil, 0))
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:])
	data := b.Bytes()

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := g.ResumeSession(context.Background(), bytes.NewReader(data), &sandbox.Config{Limits: sandbox.Limits{Memory: 1 << 32}})
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, sandbox.ErrSnapshotCorrupt)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated")
}

// An environment a snapshot could not hold is refused at the start; one a
// crafted snapshot brings is refused as corrupt.
func TestSessionEnvBounds(t *testing.T) {
	g := sandboxtest.Python(t)
	many := map[string]string{}
	for i := range 5000 {
		many[fmt.Sprintf("V%d", i)] = "x"
	}
	_, err := g.NewSession(context.Background(), &sandbox.Config{Env: many})
	assert.ErrorContains(t, err, "environment of 5000 variables")
	_, err = g.NewSession(context.Background(), &sandbox.Config{Env: map[string]string{"BIG": strings.Repeat("x", 1<<20)}})
	assert.ErrorContains(t, err, "environment of 1 variables")

	s := newSession(t, &sandbox.Config{Env: map[string]string{"A": "1"}})
	run(t, s, "x = 1")
	bad := rewriteHeader(t, snapshotOf(t, s), func(h string) string {
		return strings.Replace(h, `"env":{"A":"1"}`, `"env":{"A=B":"1"}`, 1)
	})
	_, err = g.ResumeSession(context.Background(), bytes.NewReader(bad), nil)
	assert.ErrorIs(t, err, sandbox.ErrSnapshotCorrupt)
}

// TestResumeBeforeFirstRunKeepsEnv: a session snapshotted before its first
// run, which sends the environment, still has it once resumed. It had
// none: the resume did not send it either.
func TestResumeBeforeFirstRunKeepsEnv(t *testing.T) {
	g := sandboxtest.Python(t)
	ctx := context.Background()
	s, err := g.NewSession(ctx, &sandbox.Config{Env: map[string]string{"GREETING": "hi"}})
	require.NoError(t, err)
	defer s.Close()
	var buf bytes.Buffer
	require.NoError(t, s.Snapshot(&buf))
	r, err := g.ResumeSession(ctx, &buf, nil)
	require.NoError(t, err)
	defer r.Close()
	res, err := r.Run(ctx, "import os; os.environ.get('GREETING')", nil)
	require.NoError(t, err)
	assert.Equal(t, "'hi'", res.Value)
}
