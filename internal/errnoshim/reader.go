package errnoshim

import "github.com/fumehood/fumehood/internal/wasmbin"

// reader is the section reader the passes share.
type reader = wasmbin.Reader
