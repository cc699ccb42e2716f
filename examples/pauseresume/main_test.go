package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// TestMain lets the test binary play the second process: run re-executes
// os.Executable, which in a test is this binary.
func TestMain(m *testing.M) {
	if name := os.Getenv(resumeEnv); name != "" {
		if err := resume(context.Background(), os.Stdout, name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestPauseResume(t *testing.T) {
	sandboxtest.Built(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	m := regexp.MustCompile(`^process (\d+): '3 readings, mean 12.17'
process (\d+): paused to a \d+ KiB snapshot
process (\d+): resumed; paused after 3 readings
process (\d+): '5 readings, mean 12.38'
$`).FindStringSubmatch(out.String())
	require.NotNil(t, m, out.String())
	assert.Equal(t, m[1], m[2])
	assert.Equal(t, m[3], m[4])
	assert.NotEqual(t, m[1], m[3], "the session resumed in another process")
}

func TestResumeDamagedSnapshot(t *testing.T) {
	sandboxtest.Built(t)
	name := t.TempDir() + "/bad.snap"
	require.NoError(t, os.WriteFile(name, []byte("not a snapshot"), 0o644))
	err := resume(context.Background(), &bytes.Buffer{}, name)
	assert.ErrorIs(t, err, sandbox.ErrSnapshotFormat)
}
