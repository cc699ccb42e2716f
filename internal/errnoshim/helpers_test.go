package errnoshim

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// Helpers that encode hand-built test modules.

func u32(v uint32) []byte { return wasmbin.AppendU32(nil, v) }

func str(s string) []byte { return append(u32(uint32(len(s))), s...) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// vec encodes a vector: its length, then its items.
func vec(items ...[]byte) []byte { return cat(append([][]byte{u32(uint32(len(items)))}, items...)...) }

func section(id byte, payload []byte) []byte {
	return cat([]byte{id}, u32(uint32(len(payload))), payload)
}

func module(sections ...[]byte) []byte {
	return cat(append([][]byte{{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}}, sections...)...)
}

func customSection(name string, payload []byte) []byte { return section(0, cat(str(name), payload)) }

func functype(params, results []byte) []byte {
	return cat([]byte{0x60}, u32(uint32(len(params))), params, u32(uint32(len(results))), results)
}

// fn encodes a function body with no locals; it adds the final end.
func fn(code ...[]byte) []byte {
	b := cat([]byte{0}, cat(code...), []byte{opEnd})
	return append(u32(uint32(len(b))), b...)
}

func importFunc(module, name string, typ uint32) []byte {
	return cat(str(module), str(name), []byte{externFunc}, u32(typ))
}

func exportFunc(name string, idx uint32) []byte { return cat(str(name), []byte{externFunc}, u32(idx)) }

func nameAssoc(idx uint32, name string) []byte { return cat(u32(idx), str(name)) }

// nameSection encodes a "name" section with function names only.
func nameSection(assocs ...[]byte) []byte {
	sub := vec(assocs...)
	return customSection("name", cat([]byte{1}, u32(uint32(len(sub))), sub))
}

const (
	i32     = 0x7F
	funcref = 0x70
)

func op(code byte, imm ...uint32) []byte {
	b := []byte{code}
	for _, v := range imm {
		b = append(b, u32(v)...)
	}
	return b
}

func i32Const(v int32) []byte        { return append([]byte{opI32Const}, wasmbin.AppendS32(nil, v)...) }
func localGet(i uint32) []byte       { return op(opLocalGet, i) }
func globalGet(i uint32) []byte      { return op(opGlobalGet, i) }
func call(f uint32) []byte           { return op(opCall, f) }
func returnCall(f uint32) []byte     { return op(0x12, f) }
func callIndirect(typ uint32) []byte { return op(0x11, typ, 0) }
func refFunc(f uint32) []byte        { return op(opRefFunc, f) }
func tableSet(t uint32) []byte       { return op(0x26, t) }
func constExpr(code ...[]byte) []byte {
	return cat(cat(code...), []byte{opEnd})
}

func params4() []byte { return cat(localGet(0), localGet(1), localGet(2), localGet(3)) }

// Function indices of wasiModule.
const (
	fdWrite = iota
	procExit
	fnDirect
	fnIndirect
	fnIndirectExpr
	fnViaGlobal
	fnViaRef
	fnTail
	fnExit
	numFuncs
)

// wasiModule imports fd_write and proc_exit and reaches fd_write in every
// way a module can: a direct call, tables filled by an element segment of
// indices, by one of expressions, from a global and from ref.func, a tail
// call, and an export of the import itself.
func wasiModule() []byte {
	const tFdWrite, tProcExit = 0, 1
	return module(
		section(wasmbin.SectionType, vec(
			functype([]byte{i32, i32, i32, i32}, []byte{i32}),
			functype([]byte{i32}, nil),
		)),
		section(wasmbin.SectionImport, vec(
			importFunc(ImportModule, "fd_write", tFdWrite),
			importFunc(ImportModule, "proc_exit", tProcExit),
		)),
		section(wasmbin.SectionFunction, vec(u32(0), u32(0), u32(0), u32(0), u32(0), u32(0), u32(1))),
		section(wasmbin.SectionTable, vec([]byte{funcref, 0x00, 4})),
		section(wasmbin.SectionGlobal, vec(cat([]byte{funcref, 0}, constExpr(refFunc(fdWrite))))),
		section(wasmbin.SectionExport, vec(
			exportFunc("direct", fnDirect),
			exportFunc("indirect", fnIndirect),
			exportFunc("indirect_expr", fnIndirectExpr),
			exportFunc("via_global", fnViaGlobal),
			exportFunc("via_ref", fnViaRef),
			exportFunc("tail", fnTail),
			exportFunc("exit", fnExit),
			exportFunc("fd_write", fdWrite),
		)),
		section(wasmbin.SectionElement, vec(
			cat(u32(0), constExpr(i32Const(0)), vec(u32(fdWrite))),
			cat(u32(4), constExpr(i32Const(1)), vec(constExpr(refFunc(fdWrite)))),
		)),
		section(wasmbin.SectionCode, vec(
			fn(params4(), call(fdWrite)),
			fn(params4(), i32Const(0), callIndirect(tFdWrite)),
			fn(params4(), i32Const(1), callIndirect(tFdWrite)),
			fn(i32Const(2), globalGet(0), tableSet(0), params4(), i32Const(2), callIndirect(tFdWrite)),
			fn(i32Const(3), refFunc(fdWrite), tableSet(0), params4(), i32Const(3), callIndirect(tFdWrite)),
			fn(params4(), returnCall(fdWrite)),
			fn(localGet(0), call(procExit)),
		)),
		nameSection(
			nameAssoc(fdWrite, "fd_write"), nameAssoc(procExit, "proc_exit"),
			nameAssoc(fnDirect, "direct"), nameAssoc(fnIndirect, "indirect"),
			nameAssoc(fnIndirectExpr, "indirect_expr"), nameAssoc(fnViaGlobal, "via_global"),
			nameAssoc(fnViaRef, "via_ref"), nameAssoc(fnTail, "tail"), nameAssoc(fnExit, "exit"),
		),
	)
}

// plainModule imports nothing from WASI.
func plainModule() []byte {
	return module(
		section(wasmbin.SectionType, vec(functype(nil, []byte{i32}))),
		section(wasmbin.SectionImport, vec(importFunc("env", "f", 0))),
		section(wasmbin.SectionFunction, vec(u32(0))),
		section(wasmbin.SectionExport, vec(exportFunc("g", 1))),
		section(wasmbin.SectionCode, vec(fn(call(0)))),
	)
}

func mustShim(t testing.TB, wasm []byte) []byte {
	t.Helper()
	out, err := Shim(wasm)
	require.NoError(t, err)
	return out
}

// summary is what the tests check of a module's structure.
type summary struct {
	funcTypes []uint32             // type index of each defined function
	calls     [][]uint32           // by defined function: targets of call, return_call and ref.func
	exports   map[string][2]uint32 // name -> kind, index
	elements  []uint32             // function indices of element segments, in order
	globals   [][]byte             // initialiser expressions, type and mutability first
	start     int64                // -1 if none
	names     map[uint32]string    // function names
	customs   []string
}

func summarize(t testing.TB, wasm []byte) summary {
	t.Helper()
	m, err := wasmbin.Parse(wasm)
	require.NoError(t, err)
	s := summary{exports: map[string][2]uint32{}, names: map[uint32]string{}, start: -1}
	for _, sec := range m.Sections {
		r := reader{B: sec.Payload}
		switch sec.ID {
		case wasmbin.SectionCustom:
			s.customs = append(s.customs, sec.Name)
			if sec.Name != "name" {
				continue
			}
			for !r.Done() {
				id := r.Byte()
				c := reader{B: r.Bytes(r.U32())}
				if id != 1 {
					continue
				}
				n := c.U32()
				for range n {
					idx := c.U32()
					s.names[idx] = string(c.Name())
				}
				require.NoError(t, c.Err)
			}
			r.Pos = len(r.B)
		case wasmbin.SectionFunction:
			n := r.U32()
			for range n {
				s.funcTypes = append(s.funcTypes, r.U32())
			}
		case wasmbin.SectionGlobal:
			n := r.U32()
			for range n {
				start := r.Pos
				r.ValType()
				r.Byte()
				for {
					ins, err := wasmbin.DecodeInstr(r.B[r.Pos:])
					require.NoError(t, err)
					r.Pos += ins.Len
					if ins.Op == wasmbin.OpEnd {
						break
					}
				}
				s.globals = append(s.globals, r.B[start:r.Pos])
			}
		case wasmbin.SectionExport:
			n := r.U32()
			for range n {
				name := string(r.Name())
				kind := r.Byte()
				s.exports[name] = [2]uint32{uint32(kind), r.U32()}
			}
		case wasmbin.SectionStart:
			s.start = int64(r.U32())
		case wasmbin.SectionElement:
			// Only the forms the tests use: 0 and 4 with a one-byte
			// i32.const offset, and 3.
			n := r.U32()
			for range n {
				flags := r.U32()
				require.Contains(t, []uint32{0, 3, 4}, flags)
				if flags == 3 {
					r.Byte() // element kind
				} else {
					r.Bytes(3) // i32.const k end
				}
				count := r.U32()
				for range count {
					if flags != 4 {
						s.elements = append(s.elements, r.U32())
						continue
					}
					ins, err := wasmbin.DecodeInstr(r.B[r.Pos:])
					require.NoError(t, err)
					require.Equal(t, wasmbin.OpRefFunc, ins.Op)
					s.elements = append(s.elements, ins.Index)
					r.Pos += ins.Len + 1 // and end
				}
			}
		case wasmbin.SectionCode:
			n := r.U32()
			for range n {
				body := reader{B: r.Bytes(r.U32())}
				groups := body.U32()
				for range groups {
					body.U32()
					body.ValType()
				}
				var targets []uint32
				for body.Pos < len(body.B) {
					ins, err := wasmbin.DecodeInstr(body.B[body.Pos:])
					require.NoError(t, err)
					switch ins.Op {
					case wasmbin.OpCall, wasmbin.OpReturnCall, wasmbin.OpRefFunc:
						targets = append(targets, ins.Index)
					}
					body.Pos += ins.Len
				}
				s.calls = append(s.calls, targets)
			}
		default:
			r.Pos = len(r.B)
		}
		require.NoError(t, r.Err, "section %d", sec.ID)
		require.Equal(t, len(r.B), r.Pos, "section %d read in full", sec.ID)
	}
	return s
}
