package sandbox

import (
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOutcomeReadIsBounded checks that reading a huge outcome file costs
// the host the cap, not the file's size.
func TestOutcomeReadIsBounded(t *testing.T) {
	fsys := afero.NewMemMapFs()
	const size = 32 << 20
	require.NoError(t, afero.WriteFile(fsys, "/r", []byte(`{"value":true}`), 0o644))
	require.NoError(t, afero.WriteFile(fsys, "/r.value", []byte(strings.Repeat("v", size)), 0o644))
	require.NoError(t, afero.WriteFile(fsys, "/big", []byte(`{"value":"`+strings.Repeat("v", size)+`"}`), 0o644))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, err := readOutcome(fsys, "/r", 1<<10)
	_, bigErr := readOutcome(fsys, "/big", 1<<10)
	runtime.ReadMemStats(&after)

	require.NoError(t, err)
	assert.Len(t, res.Value, 1<<10)
	assert.True(t, res.ValueTruncated)
	require.ErrorIs(t, bigErr, errOutcomeTooLarge)
	// The two reads need about 10 KiB; reading either file whole, 32 MiB.
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
}

func TestCapText(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
		cut   bool
	}{
		{"abc", 3, "abc", false},
		{"abcd", 3, "abc", true},
		{"aé", 2, "a", true},             // é is two bytes
		{"aé", 3, "aé", false},           // exactly
		{"a\xffb", 5, "a\uFFFDb", false}, // an invalid byte becomes U+FFFD
		{"a\xffb", 3, "a", true},         // whose three bytes may not fit
		{"a\xe2\x82", 9, "a\uFFFD\uFFFD", false},
		{"", 0, "", false},
		{"x", 0, "", true},
	} {
		got, cut := capText([]byte(tc.in), tc.limit)
		assert.Equal(t, tc.want, got, "%q, %d", tc.in, tc.limit)
		assert.Equal(t, tc.cut, cut, "%q, %d", tc.in, tc.limit)
		assert.LessOrEqual(t, len(got), tc.limit)
		assert.True(t, utf8.ValidString(got))
	}
}

// TestOutcomeExitStatus: the npm guest's session driver writes its outcome
// to a file the guest's code can reach; the host reads any integer there
// as the status a POSIX parent would see (0 to 255), never failing on it
// (a SystemExit(2**70) made the outcome unreadable).
func TestOutcomeExitStatus(t *testing.T) {
	fsys := afero.NewMemMapFs()
	for in, want := range map[string]int{"7": 7, "-1": 255, "256": 0, "1180591620717411303424": 255} {
		require.NoError(t, afero.WriteFile(fsys, "/r", []byte(`{"exit": `+in+`}`), 0o644))
		res, err := readOutcome(fsys, "/r", 100)
		require.NoError(t, err, in)
		assert.Equal(t, want, res.ExitCode, in)
	}
}
