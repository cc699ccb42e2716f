package runtool

import (
	"context"
	"strings"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// TestProbeFindsTimeZoneData: the probe reports time-zone data as present
// when zoneinfo's search path holds it, and as missing otherwise.
func TestProbeFindsTimeZoneData(t *testing.T) {
	py := sandboxtest.Python(t)
	tz := afero.NewMemMapFs()
	require.NoError(t, afero.WriteFile(tz, "/UTC", []byte("TZif2"), 0o644))
	for env, lacksTZ := range map[string]bool{"/tz": false, "/nowhere": true} {
		sb, err := py.NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{{Path: "/tz", FS: tz, ReadOnly: true}},
			Env: map[string]string{"PYTHONTZPATH": env}})
		require.NoError(t, err)
		defer sb.Close()
		res, err := sb.Run(context.Background(), probeCode, nil)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSuffix(string(res.Stdout), "\n"), "\n")
		require.Len(t, lines, 3, string(res.Stdout))
		assert.Empty(t, lines[2], "the built guest has no third-party packages")
		assert.Equal(t, py.Python().Version, lines[0])
		assert.Equal(t, lacksTZ, strings.Contains(lines[1], "time-zone data"), "%s: %s", env, lines[1])
		assert.Contains(t, lines[1], "ssl,ctypes")
		assert.NotContains(t, lines[1], "lzma", "the guest has lzma")
	}
}
