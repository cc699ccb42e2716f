package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCaptureKeepsStartAndEnd: past max, a capture keeps the output's
// start, a line with the count of bytes dropped and its end (from a line's
// start), never more than max bytes in all, while its tee gets every byte;
// the end is kept whatever the sizes of the writes.
func TestCaptureKeepsStartAndEnd(t *testing.T) {
	var out strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&out, "line %d\n", i)
	}
	all := out.String()
	for _, chunk := range []int{1, 7, 4096, len(all)} {
		var tee bytes.Buffer
		c := &capture{max: 64 << 10, tee: &tee}
		for p := all; len(p) > 0; p = p[min(chunk, len(p)):] {
			n, err := c.Write([]byte(p[:min(chunk, len(p))]))
			require.NoError(t, err)
			require.Equal(t, min(chunk, len(p)), n)
		}
		got := string(c.bytes())
		assert.Equal(t, all, tee.String(), "the tee gets everything")
		assert.LessOrEqual(t, len(got), c.max, chunk)
		assert.True(t, c.truncated)
		assert.Equal(t, int64(len(all)), c.total)
		head, rest, ok := strings.Cut(got, "\n[... ")
		require.True(t, ok, chunk)
		count, tail, ok := strings.Cut(rest, " bytes dropped ...]\n")
		require.True(t, ok, chunk)
		assert.True(t, strings.HasPrefix(all, head), chunk)
		assert.True(t, strings.HasSuffix(all, tail), chunk)
		assert.True(t, strings.HasPrefix(tail, "line "), "the end starts at a line: %.20q", tail)
		assert.Greater(t, len(tail), c.max/8, chunk)
		assert.Equal(t, fmt.Sprint(len(all)-len(head)-len(tail)), count, chunk)
		assert.LessOrEqual(t, cap(c.tail), 4*c.max, "the end's buffer stays bounded")
	}

	// Under max nothing is dropped; a small max keeps the start only.
	c := &capture{max: 100}
	c.Write([]byte("short"))
	assert.Equal(t, "short", string(c.bytes()))
	assert.False(t, c.truncated)
	c.Write(bytes.Repeat([]byte("x"), 200))
	assert.Equal(t, "short"+strings.Repeat("x", 95), string(c.bytes()))

	// With stop, the run stops at max and the tee got what was kept.
	var stopped error
	var tee bytes.Buffer
	c = &capture{max: 10, tee: &tee, stop: func(err error) { stopped = err }}
	_, err := c.Write([]byte("0123456789abc"))
	assert.True(t, errors.Is(err, ErrOutputLimit))
	assert.ErrorIs(t, stopped, ErrOutputLimit)
	assert.Equal(t, "0123456789", string(c.bytes()))
	assert.Equal(t, "0123456789", tee.String())
}

// TestLineTee: whole lines at once, an unended line held up to 4 KiB,
// Flush passes it on, and the writer's error comes back.
func TestLineTee(t *testing.T) {
	var got []string
	l := &lineTee{w: writerFunc(func(p []byte) (int, error) { got = append(got, string(p)); return len(p), nil })}
	for _, p := range []string{"a", "b\nc", "d\ne\nf", strings.Repeat("x", lineTeeMax)} {
		n, err := l.Write([]byte(p))
		require.NoError(t, err)
		assert.Equal(t, len(p), n)
	}
	require.NoError(t, l.Flush())
	require.NoError(t, l.Flush(), "nothing left: no write")
	assert.Equal(t, []string{"ab\n", "cd\ne\n", "f" + strings.Repeat("x", lineTeeMax)}, got)

	bad := errors.New("broken pipe")
	l = &lineTee{w: writerFunc(func(p []byte) (int, error) { return 0, bad })}
	_, err := l.Write([]byte("line\n"))
	assert.ErrorIs(t, err, bad)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
