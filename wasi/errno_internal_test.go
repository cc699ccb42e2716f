package wasi

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"
)

// TestPathEscapeByIdentity: os.Root's refusal of a path out of its
// directory is recognized by the value os wraps, not by its text: a
// refusal from any root maps to EPERM, an error that only reads the same
// does not.
func TestPathEscapeByIdentity(t *testing.T) {
	require.NotNil(t, errPathEscapes())
	r, err := os.OpenRoot(t.TempDir())
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Open("../outside")
	require.Error(t, err)
	assert.True(t, isPathEscape(err))
	assert.Equal(t, sys.EPERM, toErrno(err))

	lookalike := &fs.PathError{Op: "openat", Path: "../outside", Err: errors.New("path escapes from parent")}
	assert.False(t, isPathEscape(lookalike))
	assert.Equal(t, sys.EIO, toErrno(lookalike))
}
