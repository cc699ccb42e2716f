package hostchan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/fumehood/fumehood/hostcall"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"
)

func FuzzDecodeFrame(f *testing.F) {
	f.Add(AppendFrame(nil, []byte(`{"op":"call","name":"f"}`), nil), 64)
	f.Add(AppendFrame(nil, []byte(`{}`), []byte("body")), 6)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0}, 10)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1<<20)
	f.Add([]byte{0, 0, 0, 1}, 10)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		header, body, n, err := DecodeFrame(b, max)
		if err != nil {
			assert.True(t, errors.Is(err, ErrFrame) || errors.Is(err, hostcall.ErrTooLarge), err)
			assert.Zero(t, n)
			return
		}
		if n == 0 {
			assert.Nil(t, header)
			return
		}
		require.LessOrEqual(t, n, len(b))
		assert.LessOrEqual(t, len(header)+len(body), max)
		assert.NotEmpty(t, header)
		// Re-encoding gives back the bytes decoded.
		assert.Equal(t, b[:n], AppendFrame(nil, header, body))
	})
}

func TestDecodeFramePartial(t *testing.T) {
	full := AppendFrame(nil, []byte(`{"a":1}`), []byte("xyz"))
	for i := range len(full) {
		_, _, n, err := DecodeFrame(full[:i], 100)
		require.NoError(t, err)
		assert.Zero(t, n, "a frame cut at %d bytes is incomplete", i)
	}
	h, b, n, err := DecodeFrame(append(full, 9, 9), 100)
	require.NoError(t, err)
	assert.Equal(t, len(full), n)
	assert.Equal(t, `{"a":1}`, string(h))
	assert.Equal(t, "xyz", string(b))

	_, _, _, err = DecodeFrame(full, 9)
	assert.ErrorIs(t, err, hostcall.ErrTooLarge)
}

// roundtrip writes a request frame to a fresh open of the channel, in
// chunks of size chunk, and reads back the response.
func roundtrip(t *testing.T, s *Server, header string, chunk int) (response, []byte) {
	t.Helper()
	f, errno := s.FS().OpenFile(ChannelFile, sys.O_RDWR, 0)
	require.Zero(t, errno)
	defer f.Close()
	req := AppendFrame(nil, []byte(header), nil)
	for len(req) > 0 {
		k := min(chunk, len(req))
		n, errno := f.Write(req[:k])
		require.Zero(t, errno)
		require.Equal(t, k, n)
		req = req[k:]
	}
	var out []byte
	buf := make([]byte, 3)
	for {
		n, errno := f.Read(buf)
		require.Zero(t, errno)
		if n == 0 {
			break
		}
		out = append(out, buf[:n]...)
	}
	h, body, n, err := DecodeFrame(out, 1<<20)
	require.NoError(t, err)
	require.Equal(t, len(out), n, "exactly one response frame")
	var r response
	require.NoError(t, json.Unmarshal(h, &r))
	return r, body
}

func TestChannelServesFramesWrittenInPieces(t *testing.T) {
	s, err := NewServer(&hostcall.Config{Funcs: map[string]hostcall.Handler{
		"neg": hostcall.Func(func(ctx context.Context, a struct{ N int }) (int, error) { return -a.N, nil }),
	}}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)

	r, _ := roundtrip(t, s, `{"op":"call","name":"neg","args":{"N":5}}`, 1000)
	assert.False(t, r.OK, "no run is bound")
	assert.Contains(t, r.Error.Message, ErrNoRun.Error())

	end, err := s.Begin(context.Background())
	require.NoError(t, err)
	_, err = s.Begin(context.Background())
	assert.Error(t, err, "one run at a time")
	for _, chunk := range []int{1, 3, 1000} {
		r, _ = roundtrip(t, s, `{"op":"call","name":"neg","args":{"N":5}}`, chunk)
		require.True(t, r.OK, "%+v", r.Error)
		assert.Equal(t, "-5", string(r.Result))
	}
	r, _ = roundtrip(t, s, `not json`, 1000)
	assert.Equal(t, "protocol", r.Error.Kind)
	r, _ = roundtrip(t, s, `{"op":"dance"}`, 1000)
	assert.Equal(t, "protocol", r.Error.Kind)
	assert.Equal(t, Stats{Calls: 3}, end())
}

func TestChannelDropsAnOversizedFrame(t *testing.T) {
	s, err := NewServer(&hostcall.Config{MaxRequestBytes: 64, Funcs: map[string]hostcall.Handler{
		"ok": func(context.Context, json.RawMessage) (any, error) { return "fine", nil },
	}}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	end, err := s.Begin(context.Background())
	require.NoError(t, err)
	defer end()
	f, _ := s.FS().OpenFile(ChannelFile, sys.O_RDWR, 0)
	big := AppendFrame(nil, bytes.Repeat([]byte("x"), 1000), nil)
	_, errno := f.Write(big[:20]) // refused as soon as the length is known
	require.Zero(t, errno)
	assert.Less(t, s.Usage().Held, int64(len(big)), "the refused frame is not kept, only its answer")
	next := AppendFrame(nil, []byte(`{"op":"call","name":"ok"}`), nil)
	n, errno := f.Write(append(big[20:], next...))
	require.Zero(t, errno)
	assert.Equal(t, len(big)-20, n, "a short write: the rest of the refused frame, dropped")
	_, errno = f.Write(next)
	assert.Equal(t, sys.EAGAIN, errno, "the answer is unread")
	h1, _, _, err := DecodeFrame(readAll(t, f), 4096)
	require.NoError(t, err)
	assert.Contains(t, string(h1), `"kind":"limit"`)
	n, errno = f.Write(next)
	require.Zero(t, errno)
	require.Equal(t, len(next), n)
	h2, _, _, err := DecodeFrame(readAll(t, f), 4096)
	require.NoError(t, err)
	assert.JSONEq(t, `{"ok":true,"result":"fine"}`, string(h2), "the next frame is read intact")
	assert.Zero(t, s.Usage().Held)
}

// readAll reads f's pending response to its end.
func readAll(t *testing.T, f sys.File) []byte {
	t.Helper()
	var out []byte
	buf := make([]byte, 1000)
	for {
		n, errno := f.Read(buf)
		require.Zero(t, errno)
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
	}
}

func TestFSIsReadOnlyButTheChannel(t *testing.T) {
	s, err := NewServer(nil, nil, nil)
	require.NoError(t, err)
	fsys := s.FS()
	_, errno := fsys.OpenFile("lib/fumehood/__init__.py", sys.O_RDWR, 0)
	assert.Equal(t, sys.EROFS, errno)
	f, errno := fsys.OpenFile("lib/fumehood/__init__.py", sys.O_RDONLY, 0)
	require.Zero(t, errno)
	f.Close()
	st, errno := fsys.Stat(ChannelFile)
	require.Zero(t, errno)
	assert.NotZero(t, st.Mode&0o200)
}
