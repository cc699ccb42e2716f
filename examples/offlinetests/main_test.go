package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// TestGoodSlugify is what a test of generated code looks like: one subtest
// per case, each failing with what the function returned.
func TestGoodSlugify(t *testing.T) {
	sandboxtest.Built(t)
	outs, err := check(context.Background(), sandboxtest.Python(t), goodSlugify, "slugify", slugifyCases)
	require.NoError(t, err)
	for i, c := range slugifyCases {
		t.Run(c.Name, func(t *testing.T) {
			assert.Empty(t, outs[i].Error)
			assert.JSONEq(t, jsonString(t, c.Want), string(outs[i].Got))
			assert.True(t, passed(c, outs[i]))
		})
	}
}

func TestNaiveSlugifyIsCaught(t *testing.T) {
	sandboxtest.Built(t)
	outs, err := check(context.Background(), sandboxtest.Python(t), naiveSlugify, "slugify", slugifyCases)
	require.NoError(t, err)
	var failed []string
	for i, c := range slugifyCases {
		if !passed(c, outs[i]) {
			failed = append(failed, c.Name)
		}
	}
	assert.Equal(t, []string{"punctuation", "spaces", "accents"}, failed)
	assert.JSONEq(t, `"crème-brûlée"`, string(outs[3].Got))
}

// TestHermetic checks what generated code can see: no network, no host
// files, and clocks and randomness that are the same on every run.
func TestHermetic(t *testing.T) {
	sandboxtest.Built(t)
	const probe = `
import os, random, time, urllib.request

def probe():
    try:
        urllib.request.urlopen("http://example.com/", timeout=1)
        network = "reached"
    except Exception as e:
        network = type(e).__name__
    return [network, os.path.exists("/etc/passwd"), time.time(), random.random()]
`
	cases := []Case{{Name: "probe", Args: []any{}}}
	first, err := check(context.Background(), sandboxtest.Python(t), probe, "probe", cases)
	require.NoError(t, err)
	second, err := check(context.Background(), sandboxtest.Python(t), probe, "probe", cases)
	require.NoError(t, err)

	var got []any
	require.NoError(t, json.Unmarshal(first[0].Got, &got), first[0].Error)
	require.Len(t, got, 4)
	assert.NotEqual(t, "reached", got[0])
	assert.Equal(t, false, got[1], "host files are out of reach")
	assert.InDelta(t, float64(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Unix()), got[2], 60, "the clock starts at the epoch")
	assert.JSONEq(t, string(first[0].Got), string(second[0].Got), "the same run gives the same result")
}

func TestUncheckableCode(t *testing.T) {
	sandboxtest.Built(t)
	for name, tc := range map[string]struct {
		source string
		want   error  // matched with errors.Is, if not nil
		text   string // in the error
	}{
		"syntax error":    {source: "def slugify(title) return title", text: "SyntaxError"},
		"no function":     {source: "def slug(title): return title", text: "AttributeError"},
		"endless loop":    {source: "def slugify(title):\n    while True: pass", want: sandbox.ErrFuelExhausted},
		"import-time bug": {source: "import nonexistent\ndef slugify(t): return t", text: "ModuleNotFoundError"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := check(context.Background(), sandboxtest.Python(t), tc.source, "slugify", slugifyCases)
			require.Error(t, err)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			}
			assert.ErrorContains(t, err, tc.text)
		})
	}
}

func TestReport(t *testing.T) {
	sandboxtest.Built(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	assert.Equal(t, `naive: FAIL punctuation: slugify("Hello, World!") = "hello,-world!", want "hello-world"
naive: FAIL spaces: slugify("  many   spaces  ") = "--many---spaces--", want "many-spaces"
naive: FAIL accents: slugify("Crème Brûlée") = "crème-brûlée", want "creme-brulee"
naive: 3 of 6 cases pass
good: 6 of 6 cases pass
`, out.String())
}

func jsonString(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
