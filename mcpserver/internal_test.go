package mcpserver

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/assert"
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
