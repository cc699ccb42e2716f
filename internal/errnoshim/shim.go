// Package errnoshim lets a host return WASI errnos that wazero cannot
// express, such as ENOSPC, to a WASI preview 1 guest.
//
// wazero's WASI layer returns only the errnos of its experimental/sys.Errno
// set and turns every other error into EIO. Shim rewrites the guest so that
// each call to a function imported from "wasi_snapshot_preview1" whose type
// returns exactly one i32 (the errno) goes through a wrapper function of the
// same type that the shim adds to the module:
//
//	(func $shim (type T) (local $r i32)
//	  local.get 0 ... local.get n-1
//	  call $import
//	  local.set $r
//	  local.get $r  i32.const 29  i32.eq          ;; EIO?
//	  if
//	    global.get $errno
//	    if  global.get $errno  local.set $r  end  ;; the real errno
//	  end
//	  i32.const 0  global.set $errno               ;; always cleared
//	  local.get $r)
//
// $errno is a new mutable i32 global, initially 0, exported as GlobalName.
// A host function that fails with an errno wazero cannot express writes the
// real WASI errno into that global (through api.MutableGlobal) before it
// returns EIO; the wrapper returns the real errno instead and clears the
// global. An errno other than EIO passes through unchanged (and the global
// is cleared all the same), so a stale value can never leak into a later
// call.
//
// The wrappers and the global are added after the module's own functions and
// globals, so no existing index moves. Every reference to a wrapped import
// is redirected to its wrapper: call and return_call in function bodies,
// ref.func in code and in constant expressions (globals, tables, element
// segments), function indices of element segments, exports and the start
// function. Only the wrappers call the imports. The "name" section gains a
// name for each wrapper, "fumehood_shim_" followed by the import's name.
// DWARF sections (".debug*") are dropped if any function body's offset
// changed, as their code offsets would no longer hold.
package errnoshim

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

const (
	// ImportModule is the module whose functions are wrapped.
	ImportModule = "wasi_snapshot_preview1"
	// GlobalName is the export name of the mutable i32 global through
	// which the host passes the real errno.
	GlobalName = "fumehood_errno"
	// EIO is the WASI errno that wazero returns for errors it cannot
	// express, and that the wrappers replace.
	EIO = 29
	// ShimNamePrefix starts the name-section name of each wrapper.
	ShimNamePrefix = "fumehood_shim_"
)

// ErrShimmed reports a module that already exports GlobalName, such as the
// output of Shim.
var ErrShimmed = errors.New("errnoshim: module is already shimmed")

// Binary encodings.
const (
	funcType    = 0x60
	externFunc  = 0x00
	externGlob  = 0x03
	valI32      = 0x7F
	mutable     = 0x01
	opEnd       = 0x0B
	opIf        = 0x04
	opCall      = 0x10
	opLocalGet  = 0x20
	opLocalSet  = 0x21
	opGlobalGet = 0x23
	opGlobalSet = 0x24
	opI32Const  = 0x41
	opI32Eq     = 0x46
	opRefFunc   = 0xD2
	blockEmpty  = 0x40
)

// noShim marks an import that has no wrapper in shimmer.redirect.
const noShim = ^uint32(0)

// Shim returns a copy of the binary module wasm with its errno-returning
// WASI imports wrapped, as the package documentation describes. It does not
// modify wasm. A module that imports no such function is returned as is
// (the same slice), after its sections were checked as far as Shim reads
// them.
//
// Input whose structure Shim cannot follow is an error wrapping
// wasmbin.ErrNotWasm or wasmbin.ErrMalformed; a module that already exports
// GlobalName is an error wrapping ErrShimmed. Shim checks only what it
// reads: a module that is invalid in other ways stays invalid, for the
// runtime to reject.
func Shim(wasm []byte) ([]byte, error) {
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return nil, err
	}
	s := &shimmer{}
	changed, err := s.shim(m)
	if err != nil {
		return nil, err
	}
	if !changed {
		return wasm, nil
	}
	return m.Encode(), nil
}

// funcSig is what the shim needs of a function type.
type funcSig struct {
	params  uint32
	errnoed bool // its results are exactly [i32]
}

// wrapper is one import to wrap.
type wrapper struct {
	importIdx uint32
	typeIdx   uint32
	params    uint32
	name      string
}

type shimmer struct {
	types      []funcSig
	typesErr   error // why types stops early, if it does
	importedFn uint32
	importedGl uint32
	definedFn  uint32 // entries of the function section
	definedGl  uint32 // entries of the global section
	errnoGl    uint32 // index of the errno global
	firstShim  uint32 // function index of the first wrapper
	wrappers   []wrapper
	redirect   []uint32 // by imported function index: its wrapper's index, or noShim
	shifted    bool     // some function body moved in the code section
	body       []byte   // scratch
}

// shim rewrites m in place and reports whether it changed anything.
func (s *shimmer) shim(m *wasmbin.Module) (bool, error) {
	if err := s.readTypes(m); err != nil {
		return false, err
	}
	if err := s.readImports(m); err != nil {
		return false, err
	}
	if err := s.checkExports(m); err != nil {
		return false, err
	}
	if err := s.readCounts(m); err != nil {
		return false, err
	}
	if len(s.wrappers) == 0 {
		return false, nil
	}
	if uint64(s.importedFn)+uint64(s.definedFn)+uint64(len(s.wrappers)) > 1<<32-1 {
		return false, fmt.Errorf("%w: too many functions", wasmbin.ErrMalformed)
	}
	if uint64(s.importedGl)+uint64(s.definedGl) >= 1<<32-1 {
		return false, fmt.Errorf("%w: too many globals", wasmbin.ErrMalformed)
	}
	s.firstShim = s.importedFn + s.definedFn
	s.errnoGl = s.importedGl + s.definedGl
	for k, w := range s.wrappers {
		s.redirect[w.importIdx] = s.firstShim + uint32(k)
	}

	// Sections that may be missing are added first; the loop below then
	// rewrites every section, old or new, in order.
	if m.Section(wasmbin.SectionFunction) == nil {
		m.Insert(wasmbin.Section{ID: wasmbin.SectionFunction, Payload: []byte{0}})
	}
	if m.Section(wasmbin.SectionGlobal) == nil {
		m.Insert(wasmbin.Section{ID: wasmbin.SectionGlobal, Payload: []byte{0}})
	}
	if m.Section(wasmbin.SectionExport) == nil {
		m.Insert(wasmbin.Section{ID: wasmbin.SectionExport, Payload: []byte{0}})
	}
	if m.Section(wasmbin.SectionCode) == nil {
		m.Insert(wasmbin.Section{ID: wasmbin.SectionCode, Payload: []byte{0}})
	}

	// Rewrite every section, then drop the DWARF sections if a function
	// body moved.
	kept := m.Sections[:0]
	for _, sec := range m.Sections {
		var err error
		switch {
		case sec.ID == wasmbin.SectionFunction:
			sec.Payload, err = s.functions(sec.Payload)
		case sec.ID == wasmbin.SectionTable:
			sec.Payload, err = wasmbin.RemapTables(sec.Payload, s.funcMap)
		case sec.ID == wasmbin.SectionGlobal:
			sec.Payload, err = s.globals(sec.Payload)
		case sec.ID == wasmbin.SectionExport:
			sec.Payload, err = s.exports(sec.Payload)
		case sec.ID == wasmbin.SectionStart:
			sec.Payload, err = wasmbin.RemapStart(sec.Payload, s.funcMap)
		case sec.ID == wasmbin.SectionElement:
			sec.Payload, err = wasmbin.RemapElements(sec.Payload, s.funcMap)
		case sec.ID == wasmbin.SectionCode:
			sec.Payload, err = s.code(sec.Payload)
		case sec.ID == wasmbin.SectionCustom && sec.Name == "name":
			if p, ok := s.names(sec.Payload); ok {
				sec.Payload = p
			}
		}
		if err != nil {
			return false, fmt.Errorf("errnoshim: section %d: %w", sec.ID, err)
		}
		kept = append(kept, sec)
	}
	m.Sections = kept
	if s.shifted {
		m.RemoveCustom(func(name string) bool { return strings.HasPrefix(name, ".debug") })
	}
	return true, nil
}

// readTypes records the parameter count of each function type and whether
// it returns exactly one i32. It stops at a type form it does not know (of
// the GC proposal, which wazero does not support), and fails only if a
// wrapped import needs a type after it.
func (s *shimmer) readTypes(m *wasmbin.Module) error {
	sec := m.Section(wasmbin.SectionType)
	if sec == nil {
		return nil
	}
	r := reader{B: sec.Payload}
	n := r.Count(3)
	s.types = make([]funcSig, 0, n)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		if form := r.Byte(); form != funcType {
			if r.Err == nil {
				s.typesErr = fmt.Errorf("%w: type %d: unsupported form 0x%02x", wasmbin.ErrMalformed, i, form)
			}
			break
		}
		params := r.Count(1)
		for j := uint32(0); j < params; j++ {
			r.ValType()
		}
		results := r.Count(1)
		var first byte
		for j := uint32(0); j < results; j++ {
			if c := r.ValType(); j == 0 {
				first = c
			}
		}
		s.types = append(s.types, funcSig{params: params, errnoed: results == 1 && first == valI32})
	}
	if s.typesErr == nil {
		r.End("type")
	}
	if r.Err != nil {
		return fmt.Errorf("errnoshim: type section: %w", r.Err)
	}
	return nil
}

// readImports counts the imported functions and globals and finds the
// imports to wrap.
func (s *shimmer) readImports(m *wasmbin.Module) error {
	sec := m.Section(wasmbin.SectionImport)
	if sec == nil {
		return nil
	}
	imports, err := wasmbin.Imports(sec.Payload)
	if err != nil {
		return fmt.Errorf("errnoshim: import section: %w", err)
	}
	for _, im := range imports {
		switch im.Kind {
		case wasmbin.ImportFunc:
			if im.Module == ImportModule {
				if err := s.wrap(s.importedFn, im.Type, im.Name); err != nil {
					return err
				}
			}
			s.importedFn++
		case wasmbin.ImportGlobal:
			s.importedGl++
		}
	}
	if len(s.wrappers) > 0 {
		s.redirect = make([]uint32, s.importedFn)
		for i := range s.redirect {
			s.redirect[i] = noShim
		}
	}
	return nil
}

// wrap records the import of function idx, of type t, if it returns an errno.
func (s *shimmer) wrap(idx, t uint32, name string) error {
	if t >= uint32(len(s.types)) {
		if s.typesErr != nil {
			return fmt.Errorf("errnoshim: import %s.%s: %w", ImportModule, name, s.typesErr)
		}
		return fmt.Errorf("errnoshim: %w: import %s.%s: type %d out of range", wasmbin.ErrMalformed, ImportModule, name, t)
	}
	if sig := s.types[t]; sig.errnoed {
		s.wrappers = append(s.wrappers, wrapper{importIdx: idx, typeIdx: t, params: sig.params, name: name})
	}
	return nil
}

// checkExports fails if the module already exports GlobalName.
func (s *shimmer) checkExports(m *wasmbin.Module) error {
	sec := m.Section(wasmbin.SectionExport)
	if sec == nil {
		return nil
	}
	r := reader{B: sec.Payload}
	n := r.Count(3)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		name := r.Name()
		r.Byte()
		r.U32()
		if r.Err == nil && string(name) == GlobalName {
			return fmt.Errorf("%w: it exports %s", ErrShimmed, GlobalName)
		}
	}
	r.End("export")
	if r.Err != nil {
		return fmt.Errorf("errnoshim: export section: %w", r.Err)
	}
	return nil
}

// readCounts reads how many functions and globals the module defines.
func (s *shimmer) readCounts(m *wasmbin.Module) error {
	for _, c := range []struct {
		id  byte
		n   *uint32
		min int
	}{{wasmbin.SectionFunction, &s.definedFn, 1}, {wasmbin.SectionGlobal, &s.definedGl, 3}} {
		if sec := m.Section(c.id); sec != nil {
			r := reader{B: sec.Payload}
			*c.n = r.Count(c.min)
			if r.Err != nil {
				return fmt.Errorf("errnoshim: section %d: %w", c.id, r.Err)
			}
		}
	}
	return nil
}

// target returns the index a reference to function idx must use.
func (s *shimmer) target(idx uint32) uint32 {
	if idx < uint32(len(s.redirect)) && s.redirect[idx] != noShim {
		return s.redirect[idx]
	}
	return idx
}

// funcMap is target as a wasmbin.FuncMap.
func (s *shimmer) funcMap(idx uint32) (uint32, error) { return s.target(idx), nil }

// functions appends the wrappers' type indices to the function section.
func (s *shimmer) functions(payload []byte) ([]byte, error) {
	r := reader{B: payload}
	n := r.Count(1)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		r.U32()
	}
	r.End("function")
	if r.Err != nil {
		return nil, r.Err
	}
	p := wasmbin.AppendU32(make([]byte, 0, len(payload)+5+3*len(s.wrappers)), n+uint32(len(s.wrappers)))
	p = append(p, payload[skipU32(payload):]...)
	for _, w := range s.wrappers {
		p = wasmbin.AppendU32(p, w.typeIdx)
	}
	return p, nil
}

// skipU32 returns the length of the valid LEB128 u32 at the start of b.
func skipU32(b []byte) int {
	_, n, _ := wasmbin.U32(b)
	return n
}

// globals fixes ref.func in the initialisers and appends the errno global.
func (s *shimmer) globals(payload []byte) ([]byte, error) {
	r := reader{B: payload}
	n := r.Count(3)
	p := wasmbin.AppendU32(make([]byte, 0, len(payload)+16), n+1)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		start := r.Pos
		r.ValType()
		r.Byte()
		p = append(p, r.B[start:r.Pos]...)
		p = wasmbin.RemapConstExpr(p, &r, s.funcMap)
	}
	r.End("global")
	if r.Err != nil {
		return nil, r.Err
	}
	return append(p, valI32, mutable, opI32Const, 0, opEnd), nil
}

// exports redirects exports of wrapped imports and exports the errno global.
func (s *shimmer) exports(payload []byte) ([]byte, error) {
	entry := wasmbin.AppendU32(nil, uint32(len(GlobalName)))
	entry = append(entry, GlobalName...)
	entry = append(entry, externGlob)
	entry = wasmbin.AppendU32(entry, s.errnoGl)

	r := reader{B: payload}
	n := r.Count(3)
	p := wasmbin.AppendU32(make([]byte, 0, len(payload)+len(entry)+8), n+1)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		start := r.Pos
		r.Name()
		kind := r.Byte()
		p = append(p, r.B[start:r.Pos]...)
		idx := r.U32()
		if kind == externFunc {
			idx = s.target(idx)
		}
		p = wasmbin.AppendU32(p, idx)
	}
	r.End("export")
	if r.Err != nil {
		return nil, r.Err
	}
	return append(p, entry...), nil
}

// code redirects calls and references in every function body and appends
// the wrappers' bodies.
func (s *shimmer) code(payload []byte) ([]byte, error) {
	r := reader{B: payload}
	n := r.Count(1)
	bodies := r.Pos
	total := n + uint32(len(s.wrappers))
	p := make([]byte, 0, len(payload)+len(payload)/64+64*len(s.wrappers)+16)
	p = wasmbin.AppendU32(p, total)
	if len(p) != bodies {
		s.shifted = true // the count's encoding changed width
	}
	for i := uint32(0); i < n && r.Err == nil; i++ {
		start := r.Pos
		body := r.Bytes(r.U32())
		if r.Err != nil {
			break
		}
		changed, err := s.function(body)
		if err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		if !changed {
			p = append(p, r.B[start:r.Pos]...)
			continue
		}
		if len(s.body) != len(body) {
			s.shifted = true
		}
		p = wasmbin.AppendU32(p, uint32(len(s.body)))
		p = append(p, s.body...)
	}
	r.End("function body")
	if r.Err != nil {
		return nil, r.Err
	}
	for _, w := range s.wrappers {
		b := s.wrapperBody(w)
		p = wasmbin.AppendU32(p, uint32(len(b)))
		p = append(p, b...)
	}
	return p, nil
}

// function rewrites one function body into s.body and reports whether it
// changed. It decodes every instruction, so that no immediate is taken for
// an opcode.
func (s *shimmer) function(body []byte) (bool, error) {
	r := reader{B: body}
	groups := r.Count(2)
	for j := uint32(0); j < groups && r.Err == nil; j++ {
		r.U32() // how many locals
		r.ValType()
	}
	if r.Err != nil {
		return false, fmt.Errorf("locals: %w", r.Err)
	}
	changed := false
	prev := 0
	pos := r.Pos
	var last wasmbin.Opcode
	for pos < len(body) {
		ins, err := wasmbin.DecodeInstr(body[pos:])
		if err != nil {
			return false, fmt.Errorf("offset %d: %w", pos, err)
		}
		switch ins.Op {
		case wasmbin.OpGlobalGet, wasmbin.OpGlobalSet:
			// Invalid as written, and valid once $errno exists: refuse.
			if ins.Index >= s.errnoGl {
				return false, fmt.Errorf("%w: offset %d: global %d is not defined", wasmbin.ErrMalformed, pos, ins.Index)
			}
		case wasmbin.OpCall, wasmbin.OpReturnCall, wasmbin.OpRefFunc:
			if t := s.target(ins.Index); t != ins.Index {
				if !changed {
					s.body = s.body[:0]
					changed = true
				}
				s.body = append(s.body, body[prev:pos+1]...)
				s.body = wasmbin.AppendU32(s.body, t)
				prev = pos + ins.Len
			}
		}
		last = ins.Op
		pos += ins.Len
	}
	if last != wasmbin.OpEnd {
		return false, fmt.Errorf("%w: function body does not end with end", wasmbin.ErrMalformed)
	}
	if changed {
		s.body = append(s.body, body[prev:]...)
	}
	return changed, nil
}

// wrapperBody returns the body of w's wrapper. The result aliases s.body.
func (s *shimmer) wrapperBody(w wrapper) []byte {
	b := append(s.body[:0], 1, 1, valI32) // (local $r i32)
	for i := uint32(0); i < w.params; i++ {
		b = append(b, opLocalGet)
		b = wasmbin.AppendU32(b, i)
	}
	b = append(b, opCall)
	b = wasmbin.AppendU32(b, w.importIdx)
	b = append(b, opLocalSet)
	b = wasmbin.AppendU32(b, w.params)
	b = append(b, opLocalGet)
	b = wasmbin.AppendU32(b, w.params)
	b = append(b, opI32Const, EIO, opI32Eq, opIf, blockEmpty, opGlobalGet)
	b = wasmbin.AppendU32(b, s.errnoGl)
	b = append(b, opIf, blockEmpty, opGlobalGet)
	b = wasmbin.AppendU32(b, s.errnoGl)
	b = append(b, opLocalSet)
	b = wasmbin.AppendU32(b, w.params)
	b = append(b, opEnd, opEnd, opI32Const, 0, opGlobalSet)
	b = wasmbin.AppendU32(b, s.errnoGl)
	b = append(b, opLocalGet)
	b = wasmbin.AppendU32(b, w.params)
	b = append(b, opEnd)
	s.body = b
	return b
}

// names adds the wrappers' names to the function names of a "name"
// section. It returns false, and the section is kept as it was, if the
// section is malformed or already names a function from the wrappers' index
// on.
func (s *shimmer) names(payload []byte) ([]byte, bool) {
	var entries []byte
	for k, w := range s.wrappers {
		entries = wasmbin.AppendU32(entries, s.firstShim+uint32(k))
		name := ShimNamePrefix + w.name
		entries = wasmbin.AppendU32(entries, uint32(len(name)))
		entries = append(entries, name...)
	}
	out := make([]byte, 0, len(payload)+len(entries)+16)
	added := false
	addNew := func() {
		sub := wasmbin.AppendU32(nil, uint32(len(s.wrappers)))
		sub = append(sub, entries...)
		out = append(out, 1)
		out = wasmbin.AppendU32(out, uint32(len(sub)))
		out = append(out, sub...)
		added = true
	}
	r := reader{B: payload}
	for !r.Done() {
		start := r.Pos
		id := r.Byte()
		content := r.Bytes(r.U32())
		if r.Err != nil {
			return nil, false
		}
		if id > 1 && !added {
			addNew()
		}
		if id != 1 || added {
			out = append(out, r.B[start:r.Pos]...)
			continue
		}
		// Function names: a name map, sorted by index.
		c := reader{B: content}
		n := c.Count(2)
		for i := uint32(0); i < n && c.Err == nil; i++ {
			if idx := c.U32(); idx >= s.firstShim {
				return nil, false
			}
			c.Name()
		}
		c.End("function name")
		if c.Err != nil || uint64(n)+uint64(len(s.wrappers)) > 1<<32-1 {
			return nil, false
		}
		sub := wasmbin.AppendU32(make([]byte, 0, len(content)+len(entries)+5), n+uint32(len(s.wrappers)))
		sub = append(sub, content[skipU32(content):]...)
		sub = append(sub, entries...)
		out = append(out, 1)
		out = wasmbin.AppendU32(out, uint32(len(sub)))
		out = append(out, sub...)
		added = true
	}
	if r.Err != nil {
		return nil, false
	}
	if !added {
		addNew()
	}
	return out, true
}
