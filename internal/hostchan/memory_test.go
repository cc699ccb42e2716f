package hostchan

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/fumehood/fumehood/hostcall"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

// echoServer is a server bound to a run, with a function echoing its
// arguments (so a response is as large as the request).
func echoServer(t *testing.T) *Server {
	t.Helper()
	s, err := NewServer(&hostcall.Config{Funcs: map[string]hostcall.Handler{
		"echo": func(_ context.Context, args json.RawMessage) (any, error) { return args, nil },
	}}, nil, nil)
	require.NoError(t, err)
	end, err := s.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { end() })
	return s
}

func openChannel(t *testing.T, s *Server) sys.File {
	t.Helper()
	f, errno := s.FS().OpenFile(ChannelFile, sys.O_RDWR, 0)
	require.Zero(t, errno)
	return f
}

// echoFrame is a call of echo whose frame is about size bytes.
func echoFrame(size int) []byte {
	return AppendFrame(nil, []byte(`{"op":"call","name":"echo","args":{"pad":"`+strings.Repeat("x", size)+`"}}`), nil)
}

// TestChannelWritesWithoutReadingStayBounded is the attack of a guest that
// writes requests and never reads the answers: it once grew the host by
// gigabytes. The channel takes one request; the next waits (EAGAIN) until
// the answer is read, so what the server holds stays within its bound.
func TestChannelWritesWithoutReadingStayBounded(t *testing.T) {
	s := echoServer(t)
	bound := s.Usage().Bound
	assert.Equal(t, int64(hostcall.DefaultMaxRequestBytes+hostcall.DefaultMaxResponseBytes+responseRoom), bound)
	f := openChannel(t, s)
	defer f.Close()
	req := echoFrame(hostcall.DefaultMaxRequestBytes - 100)
	n, errno := f.Write(req)
	require.Zero(t, errno)
	require.Equal(t, len(req), n)
	refused := 0
	for range 200 {
		n, errno := f.Write(req)
		if errno == sys.EAGAIN {
			assert.Zero(t, n)
			refused++
		}
	}
	assert.Equal(t, 200, refused, "every request after the first waits for its answer to be read")
	u := s.Usage()
	assert.LessOrEqual(t, u.Peak, u.Bound)
	assert.Greater(t, u.Held, int64(hostcall.DefaultMaxRequestBytes-100), "the one answer is held")

	// Reading the answer frees it and lets the next request in.
	h, _, _, err := DecodeFrame(readAll(t, f), 2<<20)
	require.NoError(t, err)
	assert.Contains(t, string(h), `"ok":true`)
	assert.Zero(t, s.Usage().Held)
	n, errno = f.Write(req)
	require.Zero(t, errno)
	assert.Equal(t, len(req), n)

	// Many frames in one write: the channel takes the first (a short
	// write) and refuses the rest while its answer is unread.
	g := openChannel(t, s)
	defer g.Close()
	readAll(t, f)
	small := echoFrame(10)
	n, errno = g.Write(bytes.Repeat(small, 1000))
	require.Zero(t, errno)
	assert.Equal(t, len(small), n)
	assert.LessOrEqual(t, s.Usage().Peak, bound)
}

// TestChannelPartialFramesShareOneSlot is the attack of a guest holding
// many channels, each with most of a frame written: only one channel at a
// time may hold a request or an answer, the others get EAGAIN.
func TestChannelPartialFramesShareOneSlot(t *testing.T) {
	s := echoServer(t)
	req := echoFrame(hostcall.DefaultMaxRequestBytes - 100)
	var chans []sys.File
	refused := 0
	for range MaxOpen {
		f := openChannel(t, s)
		chans = append(chans, f)
		n, errno := f.Write(req[:len(req)-1])
		if errno == sys.EAGAIN {
			assert.Zero(t, n)
			refused++
		} else {
			require.Zero(t, errno)
		}
	}
	assert.Equal(t, MaxOpen-1, refused)
	u := s.Usage()
	assert.LessOrEqual(t, u.Peak, u.Bound)
	assert.LessOrEqual(t, u.Held, int64(len(req)))

	// Closing the channel holding the slot frees its frame and the slot.
	require.Zero(t, chans[0].Close())
	assert.Zero(t, s.Usage().Held)
	n, errno := chans[1].Write(req)
	require.Zero(t, errno)
	assert.Equal(t, len(req), n)
	for _, f := range chans {
		f.Close()
	}
	assert.Zero(t, s.Usage().Held, "closing releases everything")
	assert.Zero(t, s.Usage().Open)
}

// TestChannelOpensAreBounded is the attack of a guest opening the channel
// thousands of times: past MaxOpen handles (module files included), open
// fails with EMFILE, reported to the sandbox's hook.
func TestChannelOpensAreBounded(t *testing.T) {
	s := echoServer(t)
	var reported []uint16
	s.ReportErrno(func(e uint16) { reported = append(reported, e) })
	fsys := s.FS()
	var open []sys.File
	for i := range 2000 {
		name := ChannelFile
		if i%2 == 1 {
			name = "lib/fumehood/__init__.py"
		}
		f, errno := fsys.OpenFile(name, sys.O_RDONLY, 0)
		if errno != 0 {
			assert.Equal(t, wasi.EMFILE, errno)
			continue
		}
		open = append(open, f)
	}
	assert.Equal(t, MaxOpen, len(open))
	assert.Equal(t, MaxOpen, s.Usage().Open)
	require.NotEmpty(t, reported)
	assert.Equal(t, uint16(33), reported[0], "wasip1's EMFILE")

	require.Zero(t, open[0].Close())
	require.Zero(t, open[0].Close(), "a second close counts nothing")
	assert.Equal(t, MaxOpen-1, s.Usage().Open)
	f, errno := fsys.OpenFile(ChannelFile, sys.O_RDWR, 0)
	require.Zero(t, errno, "a closed handle makes room")
	f.Close()
	for _, f := range open[1:] {
		f.Close()
	}
	assert.Zero(t, s.Usage().Open)
}

// TestUnknownFunctionNameIsNotEchoedInFull is the attack of a guest calling
// a function whose name is most of a megabyte, made of characters JSON
// escapes six times over: the answer quotes only the start of it.
func TestUnknownFunctionNameIsNotEchoedInFull(t *testing.T) {
	s := echoServer(t)
	name := strings.Repeat("<", hostcall.DefaultMaxRequestBytes-100)
	header := `{"op":"call","name":"` + name + `"}`
	r, _ := roundtrip(t, s, header, 1<<20)
	require.NotNil(t, r.Error)
	assert.Equal(t, "unknown", r.Error.Kind)
	assert.Contains(t, r.Error.Message, hostcall.ErrUnknownFunction.Error())
	assert.LessOrEqual(t, len(r.Error.Message), maxMessageBytes)
	assert.Less(t, s.Usage().Peak, int64(len(header)+64<<10), "the answer is small")

	r, _ = roundtrip(t, s, `{"op":"`+strings.Repeat("\x01", 100_000)+`"}`, 1<<20)
	require.NotNil(t, r.Error)
	assert.Equal(t, "protocol", r.Error.Kind)
	assert.LessOrEqual(t, len(r.Error.Message), maxMessageBytes)
}

// TestPanicValueStaysInTheLog: a handler's panic value may hold anything
// the host had in hand; the guest learns only that the function failed.
func TestPanicValueStaysInTheLog(t *testing.T) {
	const secret = "db-password-hunter2"
	var log bytes.Buffer
	s, err := NewServer(&hostcall.Config{Funcs: map[string]hostcall.Handler{
		"boom": func(context.Context, json.RawMessage) (any, error) { panic("cannot connect with " + secret) },
	}}, nil, slog.New(slog.NewTextHandler(&log, nil)))
	require.NoError(t, err)
	end, err := s.Begin(context.Background())
	require.NoError(t, err)
	defer end()
	r, _ := roundtrip(t, s, `{"op":"call","name":"boom"}`, 1000)
	require.NotNil(t, r.Error)
	assert.Equal(t, "panic", r.Error.Kind)
	assert.Contains(t, r.Error.Message, `"boom" panicked`)
	assert.NotContains(t, r.Error.Message, secret)
	assert.Contains(t, log.String(), secret, "the value is logged")
	assert.Contains(t, log.String(), "stack=", "with the stack")
}

// TestResponseFrameIsBounded: a response larger than the server's
// response bound is replaced by an error, so an answer never exceeds it.
func TestResponseFrameIsBounded(t *testing.T) {
	s, err := NewServer(&hostcall.Config{MaxResponseBytes: 10, Funcs: map[string]hostcall.Handler{
		"big": func(context.Context, json.RawMessage) (any, error) { return strings.Repeat("y", 100), nil },
	}}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	end, err := s.Begin(context.Background())
	require.NoError(t, err)
	defer end()
	r, _ := roundtrip(t, s, `{"op":"call","name":"big"}`, 1000)
	require.NotNil(t, r.Error)
	assert.Equal(t, "limit", r.Error.Kind)
	assert.Equal(t, int64(10+responseRoom), int64(s.MaxResponseFrameBytes()))
	assert.LessOrEqual(t, s.Usage().Peak, s.Usage().Bound)
}
