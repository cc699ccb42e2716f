package wasi

import (
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// Mount returns config with fsys mounted at guestPath, an absolute path in
// the guest ("/" for its root). Pass the result to
// wazero.ModuleConfig.WithFSConfig. fsys is typically an FS from NewFS;
// any writable sys.FS works.
//
// It is wazero's experimental sysfs.FSConfig.WithSysFSMount, which every
// wazero.FSConfig implements; Mount saves its callers the type assertions.
func Mount(config wazero.FSConfig, fsys sys.FS, guestPath string) wazero.FSConfig {
	return config.(sysfs.FSConfig).WithSysFSMount(fsys, guestPath)
}
