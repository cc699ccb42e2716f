package textcut_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/fumehood/fumehood/internal/textcut"
)

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
		cut  bool
	}{
		{"hello", 10, "hello", false},
		{"hello", 5, "hello", false},
		{"hello", 3, "hel", true},
		{"héllo", 2, "h", true},           // é does not fit whole
		{"héllo", 3, "hé", true},          // it does
		{"ab€", 3, "ab", true},            // nor € in 3 bytes
		{"a\xffb", 5, "a\uFFFDb", false},  // an invalid byte becomes U+FFFD
		{"a\xffb", 3, "a", true},          // whose three bytes may not fit
		{"\xff\xfe", 10, "\uFFFD", false}, // a run of them, one U+FFFD
		{"héllo\xff", 2, "h", true},
		{"x", -1, "", true},
		{"", 0, "", false},
	} {
		got, cut := textcut.Cut(tc.in, tc.n)
		assert.Equal(t, tc.want, got, "%q, %d", tc.in, tc.n)
		assert.Equal(t, tc.cut, cut, "%q, %d", tc.in, tc.n)
		assert.LessOrEqual(t, len(got), max(tc.n, 0))
		assert.True(t, utf8.ValidString(got))
	}
}

func FuzzCut(f *testing.F) {
	f.Add("héllo\xff", 3)
	f.Fuzz(func(t *testing.T, in string, n int) {
		n %= 1 << 20
		got, cut := textcut.Cut(in, n)
		assert.LessOrEqual(t, len(got), max(n, 0))
		assert.True(t, utf8.ValidString(got))
		if !cut {
			assert.Equal(t, strings.ToValidUTF8(in, "\uFFFD"), got, "uncut text is the text")
		}
	})
}
