package sandbox

import (
	"errors"
	"strings"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// ErrStackOverflow reports a guest that ran out of stack: its C stack in
// linear memory (the stack pointer went below the bottom of the stack) or
// the runtime's call stack. It comes wrapped in a *TrapError (Result.Stop
// is StopTrap): it is the guest's failure, not fumehood's. CPython turns
// deep recursion into a RecursionError before its stack runs out when its
// stack is big enough for its C recursion limit (the built guest; see
// internal/guests/cpython.StackSize); a guest that still overflows, such as the npm
// guest with its 512 KiB stack, reports this error instead of an
// out-of-bounds access.
var ErrStackOverflow = errors.New("sandbox: guest stack overflow")

// stackOverflowError is a trap recognized as a stack overflow; it matches
// both ErrStackOverflow and the runtime's error.
type stackOverflowError struct{ err error }

func (e *stackOverflowError) Error() string {
	return "stack overflow: " + e.err.Error()
}

func (e *stackOverflowError) Unwrap() []error { return []error{ErrStackOverflow, e.err} }

// stackSlack is how close to the bottom of a stack-first stack the stack
// pointer must be, at an out-of-bounds trap, to count as an overflow: a
// function's frame can be this big and trap before the pointer goes below
// zero. It is at most an eighth of the stack.
const stackSlack = 64 << 10

// stackPointer locates a module's C stack pointer, by the convention of
// LLVM's wasm-ld (which every C, C++ and Rust WASI toolchain uses): the
// first global the module defines, a mutable i32 whose initial value is
// the top of the stack, which grows down.
type stackPointer struct {
	ok    bool
	index int    // the global's index
	top   uint32 // its initial value
	// first says the stack lies below every data segment (wasm-ld
	// --stack-first): an overflow leaves memory at its bottom and traps.
	// Otherwise it runs into static data first.
	first bool
}

// findStackPointer finds m's stack pointer; ok is false for a module that
// does not follow the convention.
func findStackPointer(m *wasmbin.Module) stackPointer {
	var imported uint32
	if s := m.Section(wasmbin.SectionImport); s != nil {
		imps, err := wasmbin.Imports(s.Payload)
		if err != nil {
			return stackPointer{}
		}
		for _, im := range imps {
			if im.Kind == wasmbin.ImportGlobal {
				imported++
			}
		}
	}
	s := m.Section(wasmbin.SectionGlobal)
	if s == nil {
		return stackPointer{}
	}
	r := &wasmbin.Reader{B: s.Payload}
	if r.Count(3) == 0 {
		return stackPointer{}
	}
	typ := r.ValType()
	mutable := r.Byte() == 1
	if r.Err != nil || typ != 0x7F || !mutable || r.Byte() != 0x41 { // i32, mut, i32.const
		return stackPointer{}
	}
	top := uint32(readS32(r))
	if r.Err != nil || r.Byte() != 0x0B || top == 0 || top%16 != 0 {
		return stackPointer{}
	}
	return stackPointer{ok: true, index: int(imported), top: top, first: dataAbove(m, top)}
}

// dataAbove reports whether every active data segment of m starts at or
// above addr (at a constant offset).
func dataAbove(m *wasmbin.Module, addr uint32) bool {
	s := m.Section(wasmbin.SectionData)
	if s == nil {
		return true
	}
	r := &wasmbin.Reader{B: s.Payload}
	n := r.Count(1)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		flags := r.U32()
		switch flags {
		case 1: // passive
		case 0, 2:
			if flags == 2 {
				r.U32() // memory index
			}
			if r.Byte() != 0x41 { // i32.const
				return false
			}
			off := uint32(readS32(r))
			if r.Byte() != 0x0B || off < addr {
				return false
			}
		default:
			return false
		}
		r.Bytes(r.U32())
	}
	return r.Err == nil
}

// check returns err as a stack overflow when it is one: the runtime's own
// call-stack overflow, or an out-of-bounds access with the stack pointer
// wrapped below zero (above its initial value) or, for a stack-first
// layout, within stackSlack of the bottom. mod is the instance that
// trapped, still open.
func (sp stackPointer) check(mod api.Module, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	// wazero's call-stack overflow (wasmruntime.ErrRuntimeStackOverflow,
	// internal to it) says "stack overflow", with "wasm error: " before it
	// in some versions.
	if strings.HasPrefix(msg, "stack overflow") || strings.HasPrefix(msg, "wasm error: stack overflow") {
		return &stackOverflowError{err: err}
	}
	if !sp.ok || mod == nil || !strings.HasPrefix(msg, "wasm error: out of bounds memory access") {
		return err
	}
	im, ok := mod.(experimental.InternalModule)
	if !ok || sp.index >= im.NumGlobal() {
		return err
	}
	g := im.Global(sp.index)
	if g.Type() != api.ValueTypeI32 {
		return err
	}
	v := uint32(g.Get())
	if v > sp.top || (sp.first && v < min(stackSlack, sp.top/8)) {
		return &stackOverflowError{err: err}
	}
	return err
}

// readS32 reads a signed LEB128 i32 from r.
func readS32(r *wasmbin.Reader) int32 {
	if r.Err != nil {
		return 0
	}
	v, n, err := wasmbin.S32(r.B[r.Pos:])
	if err != nil {
		r.Fail("i32 at offset %d: %v", r.Pos, err)
		return 0
	}
	r.Pos += n
	return v
}
