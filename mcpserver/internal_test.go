package mcpserver

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/sessionpool"
	"github.com/fumehood/fumehood/sandbox"
)

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
		cut  bool
	}{
		{"hello", 5, "hello", false},
		{"hello", 4, "hell", true},
		{"héllo", 2, "h", true}, // é is two bytes: not cut in half
		{"héllo", 3, "hé", true},
		{"a\xffb", 10, "a\uFFFDb", false},
		{"\xff\xff\xff\xff", 2, "", true}, // U+FFFD does not fit
		{"", 0, "", false},
	} {
		got, cut := truncate(c.in, c.n)
		assert.Equal(t, c.want, got, "%q %d", c.in, c.n)
		assert.Equal(t, c.cut, cut, "%q %d", c.in, c.n)
	}
}

func FuzzTruncate(f *testing.F) {
	f.Add("héllo wörld", 4)
	f.Add("\xff\xfe€", 3)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = max(0, n%64)
		got, cut := truncate(s, n)
		if len(got) > n || !utf8.ValidString(got) {
			t.Fatalf("truncate(%q, %d) = %q", s, n, got)
		}
		if utf8.ValidString(s) && (!strings.HasPrefix(s, got) || cut != (got != s)) {
			t.Fatalf("truncate(%q, %d) = %q, %v", s, n, got, cut)
		}
	})
}

// FuzzCheckLine: any line is either passed on, and then the SDK reads it
// as a message, or answered with a JSON-RPC error code.
func FuzzCheckLine(f *testing.F) {
	f.Add(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	f.Add(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`)
	f.Add(`{"jsonrpc":"2.0","id":{},"method":"ping"}`)
	f.Add(`}{`)
	f.Fuzz(func(t *testing.T, line string) {
		b := bytes.TrimSpace([]byte(line))
		if len(b) == 0 {
			return
		}
		_, code, msg := check(b)
		switch code {
		case 0:
			if _, err := jsonrpc.DecodeMessage(b); err != nil {
				t.Fatalf("passed %q, which the SDK refuses: %v", b, err)
			}
		case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest:
			if msg == "" {
				t.Fatal("no message")
			}
		default:
			t.Fatalf("code %d", code)
		}
	})
}

// TestSessionTurnHonoursTheCaller: a call waiting for a session that
// another call is using gives up when its own context ends, rather than
// waiting for the other run, which may have no deadline.
func TestSessionTurnHonoursTheCaller(t *testing.T) {
	s := &Server{live: sessionpool.New[*mcp.ServerSession](sessionpool.Options{})}
	c, err := s.live.Acquire(context.Background(), "a", nil, func(context.Context) (*sandbox.Session, error) { return nil, nil })
	require.NoError(t, err)
	c.Release(false)
	c, err = s.get(context.Background(), nil, "a")
	assert.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.get(ctx, nil, "a")
		done <- err
	}()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		t.Fatal("a call waited for the session past its own deadline")
	}

	c.Release(false)
	c, err = s.get(context.Background(), nil, "a")
	assert.NoError(t, err, "the turn is free again once released")
	c.Release(false)
	_, err = s.get(context.Background(), nil, "b")
	assert.Error(t, err)
}
