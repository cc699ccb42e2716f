package mcpserver

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestValidSnapshotNameMatchesTheRule checks validSnapshotName against the
// regular expression it replaced, on chosen names and random ones.
func TestValidSnapshotNameMatchesTheRule(t *testing.T) {
	rule := regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$`)
	names := []string{"", "a", "mine", "_x", ".x", "-x", "x.snap", "a-b_c.d", "../x", "a/b", "x\n", "\nx",
		"x ", "é", "x\x00", strings.Repeat("a", 100), strings.Repeat("a", 101), "..", "."}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := "aZ09_.-/\\\n \x00é"
	for range 20000 {
		b := make([]byte, r.IntN(104))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for _, n := range names {
		assert.Equal(t, rule.MatchString(n), validSnapshotName(n), "%q", n)
	}
	assert.True(t, validSnapshotName("mine"))
	assert.False(t, validSnapshotName("../etc"))
}
