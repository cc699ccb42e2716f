package testenv

import "github.com/fumehood/fumehood/internal/wasmbin"

// WasmName is s encoded as a WebAssembly name: its length, then its bytes.
func WasmName(s string) []byte {
	return append(wasmbin.AppendU32(nil, uint32(len(s))), s...)
}

// WasmSection is a WebAssembly section holding a vector of items: its id,
// its size, the number of items and the items.
func WasmSection(id byte, items ...[]byte) []byte {
	p := wasmbin.AppendU32(nil, uint32(len(items)))
	for _, it := range items {
		p = append(p, it...)
	}
	return append(append([]byte{id}, wasmbin.AppendU32(nil, uint32(len(p)))...), p...)
}
