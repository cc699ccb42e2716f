package pydriver_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/pydriver"
)

// frame encodes parts as the driver's Python side does.
func frame(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

func TestDecodeOutcome(t *testing.T) {
	o, err := pydriver.DecodeOutcome(frame(`{"value": true, "exception": false, "exit": null}`, "42", "", "", ""), 100)
	require.NoError(t, err)
	assert.Equal(t, &pydriver.Outcome{HasValue: true, Value: "42"}, o)

	o, err = pydriver.DecodeOutcome(frame(`{"value": false, "exception": true, "exit": 2}`, "ignored", "ValueError", "bad", "Traceback\n"), 100)
	require.NoError(t, err)
	require.NotNil(t, o.Exit)
	assert.Equal(t, 2, *o.Exit)
	assert.False(t, o.HasValue)
	assert.Equal(t, &pydriver.Exception{Type: "ValueError", Message: "bad", Traceback: "Traceback\n"}, o.Exception)

	// The plain outcome (no value, no exception, no exit), which skips the
	// JSON decoder, decodes as any other: its texts are ignored.
	o, err = pydriver.DecodeOutcome(frame(`{"value": false, "exception": false, "exit": null}`, "v", "T", "m", "tb"), 100)
	require.NoError(t, err)
	assert.Equal(t, &pydriver.Outcome{}, o)
	o, err = pydriver.DecodeOutcome(frame(`{"value": false, "exception": false, "exit": 0}`, "", "", "", ""), 100)
	require.NoError(t, err)
	require.NotNil(t, o.Exit, "a near miss of the plain form goes through the decoder")
	assert.Equal(t, 0, *o.Exit)

	// Texts are cut at the limit on a character boundary, invalid UTF-8
	// replaced.
	o, err = pydriver.DecodeOutcome(frame(`{"value": true}`, "ab\xffé"+strings.Repeat("x", 10), "", "", ""), 4)
	require.NoError(t, err)
	assert.Equal(t, "ab", o.Value, "the replacement character does not fit in 4 bytes")
	assert.True(t, o.Truncated)
	o, err = pydriver.DecodeOutcome(frame(`{"value": true}`, "a\xffb", "", "", ""), 5)
	require.NoError(t, err)
	assert.Equal(t, "a\uFFFDb", o.Value)
	assert.False(t, o.Truncated)
	o, err = pydriver.DecodeOutcome(frame(`{"value": true}`, "aé", "", "", ""), 2)
	require.NoError(t, err)
	assert.Equal(t, "a", o.Value)
	assert.True(t, o.Truncated)
	o, err = pydriver.DecodeOutcome(frame(`{"value": true}`, "aé", "", "", ""), 3)
	require.NoError(t, err)
	assert.Equal(t, "aé", o.Value)
	assert.False(t, o.Truncated)

	for name, b := range map[string][]byte{
		"empty":       nil,
		"four parts":  frame(`{}`, "", "", ""),
		"overlong":    append(frame(`{}`, "", "", ""), 0xff, 0xff, 0xff, 0x7f),
		"trailing":    append(frame(`{}`, "", "", "", ""), 0),
		"not json":    frame(`{`, "", "", "", ""),
		"huge json":   frame(`"`+strings.Repeat("a", 5000)+`"`, "", "", "", ""),
		"wrong types": frame(`{"value": "yes"}`, "", "", "", ""),
	} {
		_, err := pydriver.DecodeOutcome(b, 100)
		assert.ErrorIs(t, err, pydriver.ErrOutcomeCorrupt, name)
	}
}

// TestDecodeOutcomeExitStatus: a SystemExit's status is read as the status
// a POSIX parent sees of python exiting with it (0 to 255), whatever
// integer the outcome holds: the driver sends it so already, but the
// guest's code can write the outcome, and 2**70 made it undecodable.
func TestDecodeOutcomeExitStatus(t *testing.T) {
	for in, want := range map[string]int{
		"0": 0, "3": 3, "255": 255, "256": 0, "-1": 255, "-256": 0, "1000": 232,
		"9223372036854775807":           255, // 2**63-1: its low 8 bits
		"-9223372036854775808":          0,   // -2**63
		"9223372036854775808":           255, // 2**63: past a long long, as CPython's exit, -1
		"1180591620717411303424":        255, // 2**70
		"-" + strings.Repeat("9", 4000): 255,
	} {
		o, err := pydriver.DecodeOutcome(frame(`{"value": false, "exception": false, "exit": `+in+`}`, "", "", "", ""), 100)
		require.NoError(t, err, in)
		require.NotNil(t, o.Exit, in)
		assert.Equal(t, want, *o.Exit, in)
	}
	for _, in := range []string{"1.5", "1e3", `"3"`, "true"} {
		_, err := pydriver.DecodeOutcome(frame(`{"value": false, "exception": false, "exit": `+in+`}`, "", "", "", ""), 100)
		assert.ErrorIs(t, err, pydriver.ErrOutcomeCorrupt, in)
	}
}

// FuzzDecodeOutcome checks that no input panics the decoder and that every
// text it returns is valid UTF-8 within the limit.
func FuzzDecodeOutcome(f *testing.F) {
	f.Add(frame(`{"value": true, "exception": true, "exit": 1}`, "v", "t", "m", "tb"), 3)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, 0)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		limit %= 1 << 16
		o, err := pydriver.DecodeOutcome(b, limit)
		if err != nil {
			assert.ErrorIs(t, err, pydriver.ErrOutcomeCorrupt)
			return
		}
		texts := []string{o.Value}
		if o.Exception != nil {
			texts = append(texts, o.Exception.Type, o.Exception.Message, o.Exception.Traceback)
		}
		for _, s := range texts {
			assert.LessOrEqual(t, len(s), max(limit, 0))
			assert.True(t, utf8Valid(s))
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }
