package sandbox_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// requireBounded checks that every text of a session run's Result is at
// most limit bytes of valid UTF-8.
func requireBounded(t *testing.T, res *sandbox.Result, err error, limit int) {
	t.Helper()
	require.NotNil(t, res, "error: %v", err)
	texts := map[string]string{"Value": res.Value, "Stdout": string(res.Stdout), "Stderr": string(res.Stderr)}
	if e := res.Exception; e != nil {
		texts["Exception.Type"], texts["Exception.Message"], texts["Exception.Traceback"] = e.Type, e.Message, e.Traceback
	}
	for name, text := range texts {
		assert.LessOrEqual(t, len(text), limit, "%s is %d bytes", name, len(text))
		if name != "Stdout" && name != "Stderr" {
			assert.True(t, utf8.ValidString(text), "%s is not valid UTF-8", name)
		}
	}
	if err != nil {
		// The error's text holds at most the exception's type and message.
		assert.LessOrEqual(t, len(err.Error()), 2*limit+100, "the error is %d bytes", len(err.Error()))
	}
}

// TestSessionOutcomeCappedByTheHost attacks the caps of a session run's
// texts: each is cut by the host to MaxOutput bytes, whatever the driver
// (which the guest's code can reach) did.
func TestSessionOutcomeCappedByTheHost(t *testing.T) {
	const limit = 1 << 10
	cfg := &sandbox.RunOptions{Limits: sandbox.Limits{MaxOutput: limit}}
	ctx := context.Background()
	s := newSession(t, nil)

	t.Run("exception message and traceback", func(t *testing.T) {
		res, err := s.Run(ctx, `raise ValueError("x" * 30_000_000)`, cfg)
		var exc *sandbox.Exception
		require.ErrorAs(t, err, &exc)
		requireBounded(t, res, err, limit)
		assert.Equal(t, "ValueError", exc.Type)
		assert.True(t, strings.HasPrefix(exc.Message, "xxxxxxxx"), exc.Message)
		assert.Equal(t, limit, len(exc.Message))
		assert.True(t, strings.HasPrefix(exc.Traceback, "Traceback (most recent call last):"), exc.Traceback)
		assert.True(t, exc.Truncated)
		assert.True(t, res.StderrTruncated)
	})

	t.Run("exception type", func(t *testing.T) {
		res, err := s.Run(ctx, `raise type("E" * 5_000_000, (Exception,), {})("short")`, cfg)
		var exc *sandbox.Exception
		require.ErrorAs(t, err, &exc)
		requireBounded(t, res, err, limit)
		assert.Equal(t, limit, len(exc.Type))
		assert.Empty(t, strings.Trim(exc.Type, "E"))
		assert.Equal(t, "short", exc.Message)
		assert.True(t, exc.Truncated)
	})

	t.Run("a small exception is whole", func(t *testing.T) {
		_, err := s.Run(ctx, `raise KeyError("k")`, cfg)
		var exc *sandbox.Exception
		require.ErrorAs(t, err, &exc)
		assert.Equal(t, "'k'", exc.Message)
		assert.False(t, exc.Truncated)
	})

	// The driver's request says where it cuts texts: the driver has read
	// it by then, and the code turns the cut off.
	raise := "import sys\nsys._getframe(2).f_locals['n'] = None\n"
	t.Run("value after the request is edited", func(t *testing.T) {
		res, err := s.Run(ctx, raise+"'v' * 30_000_000", cfg)
		require.NoError(t, err)
		requireBounded(t, res, err, limit)
		assert.True(t, res.HasValue)
		assert.True(t, res.ValueTruncated)
		assert.Equal(t, limit, len(res.Value))
		assert.Equal(t, "'", strings.TrimRight(res.Value, "v"))
	})

	t.Run("exception after the request is edited", func(t *testing.T) {
		res, err := s.Run(ctx, raise+"raise ValueError('m' * 30_000_000)", cfg)
		var exc *sandbox.Exception
		require.ErrorAs(t, err, &exc)
		requireBounded(t, res, err, limit)
		assert.True(t, exc.Truncated)
	})

	t.Run("cut at a character boundary", func(t *testing.T) {
		// 'é' is two bytes: a cut at an odd byte would split one.
		res, err := s.Run(ctx, raise+"'é' * 10_000", cfg)
		require.NoError(t, err)
		requireBounded(t, res, err, limit)
		assert.Equal(t, limit-1, len(res.Value), "1 + 511*2 bytes: the 512th 'é' would pass the cap")
		assert.Equal(t, "'", strings.TrimRight(res.Value, "é"))
		assert.True(t, res.ValueTruncated)
	})

	t.Run("lone surrogates", func(t *testing.T) {
		res, err := s.Run(ctx, `raise ValueError("\udc80" * 100_000)`, cfg)
		var exc *sandbox.Exception
		require.ErrorAs(t, err, &exc)
		requireBounded(t, res, err, limit)
		assert.True(t, exc.Truncated)
	})

	// The code forges the outcome: the driver returns it through memory,
	// where the code fills it with texts past the cap and turns the
	// guest's cut off.
	t.Run("forged outcome", func(t *testing.T) {
		big, huge := `import sys
sys._getframe(2).f_locals['n'] = None
out = sys._getframe(1).f_locals['out']
big = "f" * 15_000_000
out.update(value=big, type=big, message=big, traceback=big)
`, `import sys
sys._getframe(1).f_locals['out']['exit'] = 'f' * 30_000_000
`
		res, err := s.Run(ctx, big, cfg)
		requireBounded(t, res, err, limit)
		require.ErrorAs(t, err, new(*sandbox.Exception))
		assert.True(t, res.ValueTruncated)
		assert.True(t, res.Exception.Truncated)

		res, err = s.Run(ctx, huge, cfg)
		requireBounded(t, res, err, limit)
		require.Error(t, err, "an outcome past its bound is refused")
	})

	// The session goes on.
	res, err := s.Run(ctx, "1 + 1", cfg)
	require.NoError(t, err)
	assert.Equal(t, "2", res.Value)
	assert.False(t, res.ValueTruncated)
}
