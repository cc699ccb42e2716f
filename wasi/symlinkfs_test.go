package wasi_test

import (
	"errors"
	"io"
	"os"
	"syscall"

	"github.com/spf13/afero"
	"github.com/spf13/afero/mem"
)

// symlinkMemFs is an afero.MemMapFs that can hold symbolic links, for tests:
// a link is a file whose mode has fs.ModeSymlink and whose content is the
// target. Like any backing fs used by wasi.FS, it never follows links
// itself: Stat and LstatIfPossible both describe a link as a link, and a
// path through a link does not exist.
type symlinkMemFs struct {
	afero.Fs
}

func newSymlinkMemFs() *symlinkMemFs {
	return &symlinkMemFs{Fs: afero.NewMemMapFs()}
}

var (
	_ afero.Lstater    = (*symlinkMemFs)(nil)
	_ afero.Linker     = (*symlinkMemFs)(nil)
	_ afero.LinkReader = (*symlinkMemFs)(nil)
)

// LstatIfPossible implements afero.Lstater.
func (s *symlinkMemFs) LstatIfPossible(name string) (os.FileInfo, bool, error) {
	fi, err := s.Fs.Stat(name)
	return fi, true, err
}

// SymlinkIfPossible implements afero.Linker.
func (s *symlinkMemFs) SymlinkIfPossible(target, name string) error {
	if _, err := s.Fs.Stat(name); err == nil {
		return &os.LinkError{Op: "symlink", Old: target, New: name, Err: os.ErrExist}
	}
	f, err := s.Fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o777)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteString(target); err != nil {
		return err
	}
	mf, ok := f.(*mem.File)
	if !ok {
		return errors.New("symlinkMemFs: not a MemMapFs file")
	}
	mem.SetMode(mf.Data(), os.ModeSymlink|0o777)
	return nil
}

// ReadlinkIfPossible implements afero.LinkReader.
func (s *symlinkMemFs) ReadlinkIfPossible(name string) (string, error) {
	fi, err := s.Fs.Stat(name)
	if err != nil {
		return "", err
	}
	if fi.Mode()&os.ModeSymlink == 0 {
		return "", &os.PathError{Op: "readlink", Path: name, Err: syscall.EINVAL}
	}
	f, err := s.Fs.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}
