package wasifs_test

import (
	"fmt"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sysfs"

	"github.com/fumehood/fumehood/internal/wasifs"
)

// This mounts a writable in-memory file system with a quota at "/" and a
// read-only one at "/data".
func ExampleNewFS() {
	scratch, err := wasifs.NewFS(afero.NewMemMapFs(), wasifs.Options{
		Quota: wasifs.Quota{MaxBytes: 64 << 20, MaxFiles: 10_000},
	})
	if err != nil {
		panic(err)
	}
	data, err := wasifs.NewFS(afero.NewMemMapFs(), wasifs.Options{ReadOnly: true})
	if err != nil {
		panic(err)
	}
	fsConfig := wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(scratch, "/")
	fsConfig = fsConfig.(sysfs.FSConfig).WithSysFSMount(data, "/data")
	moduleConfig := wazero.NewModuleConfig().WithFSConfig(fsConfig)
	_ = moduleConfig // pass to wazero.Runtime.InstantiateModule

	fmt.Println(scratch, data)
	// Output: wasifs.FS(MemMapFS, rw) wasifs.FS(MemMapFS, ro)
}
