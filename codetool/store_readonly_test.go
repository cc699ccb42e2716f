//go:build linux

package codetool_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sessionstore"
)

// seeReadOnly makes a replica process see the directory store at dir
// read-only: as root, a read-only bind mount of it in the process's own
// mount namespace (replicaCmd's caller unshares it); otherwise the test
// made the files read-only already.
func seeReadOnly(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("skip: a bind mount: %w", err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("skip: a read-only remount: %w", err)
	}
	return nil
}

// TestStoreReadOnly: a replica whose directory store is read-only (a
// read-only file system, or files it may not write) fails each call with
// the file system's error naming the store, runs nothing, and loses
// nothing: the conversation is as it was for a replica that can write.
func TestStoreReadOnly(t *testing.T) {
	root := t.TempDir()
	here := storeTool(t, root, 0)
	r := here.Call(context.Background(), "ro", args("x = 1; x"))
	require.False(t, r.IsError, r.Text())
	st, err := sessionstore.Open(context.Background(), root, &sessionstore.Options{Key: storeKey})
	require.NoError(t, err)
	defer st.Close()
	before, err := st.Load(context.Background(), "ro")
	require.NoError(t, err)

	cmd := replicaCmd(root, 0)
	cmd.Env = append(cmd.Env, replicaReadOnly+"=1")
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	} else {
		setWritable(t, root, false)
		t.Cleanup(func() { setWritable(t, root, true) })
	}
	there := startReplicaCmd(t, cmd)
	if ready := there.result(t); ready.Error != "ready" {
		if strings.HasPrefix(ready.Error, "skip: ") {
			t.Skip(ready.Error)
		}
		t.Fatal(ready.Error)
	}
	for _, conv := range []string{"ro", "new"} {
		there.send(t, conv, "x = globals().get('x', 0) + 1000; print('ran')")
		res := there.result(t)
		require.True(t, res.IsError, "conversation %s", conv)
		assert.Contains(t, res.Error, root, "the error names the store")
		assert.Regexp(t, "read-only file system|permission denied", res.Error)
		assert.NotContains(t, res.Error, "ran")
		t.Logf("%s: %s", conv, res.Error)
	}

	if os.Geteuid() != 0 {
		setWritable(t, root, true)
	}
	after, err := st.Load(context.Background(), "ro")
	require.NoError(t, err)
	assert.Equal(t, before, after, "the head did not move")
	_, err = st.Load(context.Background(), "new")
	assert.ErrorIs(t, err, sessionstore.ErrNotFound)
	r = here.Call(context.Background(), "ro", args("x"))
	require.False(t, r.IsError, r.Text())
	assert.Equal(t, "1", *r.Value)
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		assert.False(t, strings.HasPrefix(d.Name(), ".tmp-"), "a partial file: %s", path)
		return nil
	}))
}

// setWritable gives the owner write permission on a tree, or takes it
// away.
func setWritable(t *testing.T, root string, w bool) {
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode().Perm() &^ 0o222
		if w {
			mode |= 0o200
		}
		return os.Chmod(path, mode)
	}))
}
