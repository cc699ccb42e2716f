package sandbox

import (
	"fmt"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// Bounds on what a module given to Compile may declare. A few bytes of a
// module can declare billions of locals (wazero's compiler then needs
// about 32 bytes of host memory for each) or table elements (8 bytes each,
// allocated outside the run's memory limit, and table.grow may add up to
// 2^32 of them).
const (
	// maxLocals is the most locals one function may declare: the limit web
	// browsers enforce.
	maxLocals = 50_000
	// maxTableElements bounds the elements of all of a module's tables
	// together, at start and after any growth: 8 MiB of host memory.
	maxTableElements = 1 << 20
)

// boundModule refuses a module that declares too many locals, and gives
// its tables maximums so that they never hold more than maxTableElements.
func boundModule(wasm []byte) ([]byte, error) {
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	if err := wasmbin.CheckLocals(m, maxLocals); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	if err := wasmbin.BoundTables(m, maxTableElements); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	return m.Encode(), nil
}
