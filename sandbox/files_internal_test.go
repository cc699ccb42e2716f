package sandbox

import (
	"io/fs"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFilesHideControlOfAnySandbox: hiding the control directory is a
// property of Files for any sandbox that mounts it, not of sessions only;
// what Files cannot reach stays there, and a sandbox without it has no
// such rule.
func TestFilesHideControlOfAnySandbox(t *testing.T) {
	ctl := afero.NewMemMapFs()
	require.NoError(t, afero.WriteFile(ctl, "/result-1", []byte("{}"), 0o644))
	g := &Guest{}
	sb, err := g.newSandbox(&Config{Mounts: []Mount{{Path: controlPath, FS: ctl}}}, true)
	require.NoError(t, err)
	defer sb.Close()

	files := sb.Files()
	_, err = files.Stat(controlPath + "/result-1")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.ErrorIs(t, files.WriteFile(controlPath+"/x", nil), fs.ErrNotExist)
	require.NoError(t, files.RemoveAll(controlPath+"/result-1"))

	b, err := afero.ReadFile(ctl, "/result-1")
	require.NoError(t, err, "still there, and in fumehood's reach")
	assert.Equal(t, "{}", string(b))

	plain, err := g.newSandbox(nil, false)
	require.NoError(t, err)
	defer plain.Close()
	require.NoError(t, plain.Files().MkdirAll(controlPath))
	fi, err := plain.Files().Stat(controlPath)
	require.NoError(t, err, "without the control mount, it is an ordinary name")
	assert.True(t, fi.IsDir())
}
