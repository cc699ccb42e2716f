package sandbox

import (
	"errors"
	"math"
	"reflect"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// ErrStackOverflow reports a guest that ran out of stack: its C stack in
// linear memory (the stack pointer went below the bottom of the stack) or
// the runtime's call stack. It comes wrapped in a *TrapError, with
// Result.Stop StopStack: the guest's failure, not fumehood's. CPython
// turns deep recursion into a RecursionError before its C stack runs out
// (its stack is big enough for its C recursion limit: see
// guests/cpython.StackSize); C code that recurses without
// counting (the hash of a tuple nested a million deep) runs the runtime's
// call stack out, and a WASI program with a small stack its own, and
// either reports this error instead of an out-of-bounds access.
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
	// floor is the address below which the stack pointer is never found
	// but in an overflow: stackSlack or an eighth of the stack, and never
	// above the lowest static data (a stack below all data reaches that
	// low only when nearly full; a stack above data, only after running
	// through all of it); 0 when a data segment's place is not a constant.
	floor uint32
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
	sp := stackPointer{ok: true, index: int(imported), top: top}
	if low, ok := lowestData(m); ok {
		sp.first = low >= top
		sp.floor = min(stackSlack, top/8, low)
	}
	return sp
}

// lowestData returns the lowest address at which an active data segment
// of m starts (math.MaxUint32 for none); ok is false when a segment's
// offset is not a constant.
func lowestData(m *wasmbin.Module) (low uint32, ok bool) {
	low = math.MaxUint32
	s := m.Section(wasmbin.SectionData)
	if s == nil {
		return low, true
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
				return 0, false
			}
			off := uint32(readS32(r))
			if r.Byte() != 0x0B {
				return 0, false
			}
			low = min(low, off)
		default:
			return 0, false
		}
		r.Bytes(r.U32())
	}
	return low, r.Err == nil
}

// check returns err as a stack overflow when it is one: the runtime's own
// call-stack overflow, or an out-of-bounds access with the stack pointer
// wrapped below zero (above its initial value) or below its floor. mod is the instance that
// trapped, still open. The trap is found by its type anywhere in err's
// chain, so a caller's wrapping (the driver's "cpython: fumehood_exec: ")
// does not hide it, and nothing the guest wrote can pose as one.
func (sp stackPointer) check(mod api.Module, err error) error {
	trap := runtimeTrap(err)
	if trap == "" {
		return err
	}
	if trap == trapStackOverflow {
		return &stackOverflowError{err: err}
	}
	if !sp.ok || mod == nil || trap != trapOutOfBounds {
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
	if v > sp.top || v < sp.floor {
		return &stackOverflowError{err: err}
	}
	return err
}

// The runtime's traps check tells apart (wazero's wasmruntime errors).
const (
	trapStackOverflow = "stack overflow"
	trapOutOfBounds   = "out of bounds memory access"
)

// wasmruntimeError is the package path and name of wazero's trap type,
// wasmruntime.Error, internal to it: its values are the traps (their
// text, such as "stack overflow", is all they hold), and neither a guest
// nor a host function can make one.
const wasmruntimePkg, wasmruntimeType = "github.com/tetratelabs/wazero/internal/wasmruntime", "Error"

// runtimeTrap returns the text of the runtime's trap in err's chain
// (trapStackOverflow, trapOutOfBounds, ...), or "" when there is none.
func runtimeTrap(err error) string {
	for todo := []error{err}; len(todo) > 0; {
		e := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if e == nil {
			continue
		}
		if t := reflect.TypeOf(e); t.Kind() == reflect.Pointer && t.Elem().PkgPath() == wasmruntimePkg && t.Elem().Name() == wasmruntimeType {
			return e.Error()
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			todo = append(todo, u.Unwrap())
		case interface{ Unwrap() []error }:
			todo = append(todo, u.Unwrap()...)
		}
	}
	return ""
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
