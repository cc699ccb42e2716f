package wasi_test

import (
	"fmt"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero"

	"github.com/fumehood/fumehood/wasi"
)

// This mounts a writable in-memory file system with a quota at "/" and a
// read-only one at "/data".
func ExampleNewFS() {
	scratch, err := wasi.NewFS(afero.NewMemMapFs(), wasi.Options{
		Quota: wasi.Quota{MaxBytes: 64 << 20, MaxFiles: 10_000},
	})
	if err != nil {
		panic(err)
	}
	data, err := wasi.NewFS(afero.NewMemMapFs(), wasi.Options{ReadOnly: true})
	if err != nil {
		panic(err)
	}
	fsConfig := wasi.Mount(wazero.NewFSConfig(), scratch, "/")
	fsConfig = wasi.Mount(fsConfig, data, "/data")
	moduleConfig := wazero.NewModuleConfig().WithFSConfig(fsConfig)
	_ = moduleConfig // pass to wazero.Runtime.InstantiateModule

	fmt.Println(scratch, data)
	// Output: wasi.FS(MemMapFS, rw) wasi.FS(MemMapFS, ro)
}
