package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sessionstore/natsstore/natstest"
)

// TestRunStoreSession: `run --store URL --session NAME` continues a named
// session across processes, on a directory and on NATS; bad names, URLs
// and keys are refused in words.
func TestRunStoreSession(t *testing.T) {
	t.Setenv(storeKeyEnv, "the operator's key, 32 bytes....")
	for name, url := range map[string]string{"dir": t.TempDir(), "nats": natstest.Run(t).URL()} {
		t.Run(name, func(t *testing.T) {
			out, errs, err := subprocess(t, "run", "--store", url, "--session", "s-1", "-c", "x = 41")
			require.NoError(t, err, errs)
			assert.Equal(t, "", out)
			out, errs, err = subprocess(t, "run", "--store", url, "--session", "s-1", "-c", "x += 1; x")
			require.NoError(t, err, errs)
			assert.Equal(t, "42\n", out)
			code, _, errs := fumehood(t, "", "run", "--store", url, "--session", "s-1", "-c", "1/0")
			assert.Equal(t, 1, code)
			assert.Contains(t, errs, "ZeroDivisionError")
			code, out, errs = fumehood(t, "", "run", "--store", url, "--session", "s-1", "-c", "x")
			assert.Equal(t, 0, code, errs)
			assert.Equal(t, "42\n", out)

			t.Setenv(storeKeyEnv, "another key, of 32 bytes........")
			code, _, errs = fumehood(t, "", "run", "--store", url, "--session", "s-1", "-c", "x")
			assert.Equal(t, exitFailure, code)
			assert.Contains(t, errs, "integrity check")
		})
	}
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--store", dir, "--session", "../etc", "-c", "1"},
		{"--store", dir, "--session", "a/b", "-c", "1"},
		{"--store", dir, "-c", "1"},
		{"--session", "s", "-c", "1"},
		{"--store", "redis://localhost", "--session", "s", "-c", "1"},
		{"--store", dir, "--session", "s", "--snapshot", dir + "/x", "-c", "1"},
		{"--store", dir, "--session", "s", "-c", "1", "arg"},
	} {
		code, _, errs := fumehood(t, "", append([]string{"run"}, args...)...)
		assert.Equal(t, exitUsage, code, "%q: %s", args, errs)
	}
}
