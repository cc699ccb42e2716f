package sandbox

import (
	"path"

	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

// controlQuota bounds a sandbox's control directory (controlPath).
var controlQuota = wasi.Quota{MaxBytes: 64 << 20, MaxFiles: 16}

// clearControl empties the sandbox's control directory of whatever the
// last run's code put there.
func (s *Sandbox) clearControl() { clearDir(s.ctlFS, ".") }

// clearDir removes everything in directory dir of fsys, through fsys,
// which gives the quota back.
func clearDir(fsys *wasi.FS, dir string) {
	f, errno := fsys.OpenFile(dir, sys.O_RDONLY|sys.O_DIRECTORY, 0)
	if errno != 0 {
		return
	}
	dirents, _ := f.Readdir(-1)
	f.Close()
	for _, d := range dirents {
		if d.Name == "." || d.Name == ".." {
			continue
		}
		p := path.Join(dir, d.Name)
		if st, errno := fsys.Lstat(p); errno == 0 && st.Mode.IsDir() {
			clearDir(fsys, p)
			fsys.Rmdir(p)
		} else {
			fsys.Unlink(p)
		}
	}
}
