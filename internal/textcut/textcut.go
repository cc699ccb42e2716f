// Package textcut cuts text at a UTF-8 character boundary: the one way
// fumehood caps the texts it returns (a run's value and exception, a
// tool's output, an echoed name).
package textcut

import (
	"strings"
	"unicode/utf8"
)

// Cut returns text as valid UTF-8 (a run of invalid bytes becomes U+FFFD)
// of at most n bytes, cut at a character boundary, and whether it cut
// anything. It reads at most n+1 bytes of text.
func Cut(text string, n int) (string, bool) {
	n = max(n, 0)
	cut := len(text) > n
	if cut {
		text = text[:n+1] // the last byte only tells whether a character ends at n
	}
	if !cut && utf8.ValidString(text) {
		return text, false
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	if len(text) <= n {
		return text, cut
	}
	i := n
	for i > 0 && !utf8.RuneStart(text[i]) {
		i--
	}
	return text[:i], true
}
