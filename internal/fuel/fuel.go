// Package fuel instruments a WebAssembly module so that it counts the work it
// does and asks the host for more when its budget runs out.
//
// wazero has no fuel of its own, so Instrument rewrites the binary:
//
//   - It adds a mutable i64 global, exported as GlobalName, that holds the
//     remaining fuel and counts down from 0, its initial value.
//   - It imports a function ImportModule.ImportName with no parameters and
//     no results, after the module's other function imports.
//   - Every instruction costs 1, except nop, drop, block, loop, end and else
//     (and the exception-handling markers try, try_table, catch, catch_all
//     and delegate), which cost 0, as Wasmtime counts.
//   - The code is split into regions, straight runs that start at the
//     function entry, a loop body, an if or else arm, an exception handler,
//     and after the end of each block. A region subtracts its whole cost
//     when it starts, so a branch, return or trap that leaves it early has
//     paid for all of it. The charge is still deterministic: the same run
//     uses the same fuel.
//   - To run fewer charges, some costs are paid by an earlier region that
//     runs at least as often, within one pass through the function or loop
//     body: the code after a block, loop or if that is left only through
//     its end continues the region that opened it, if that region reaches
//     it whenever it runs; the code after a block entered only by br and by
//     falling through, from regions that reach the branch or the end
//     whenever they run, is paid by those regions; the cheaper arm's cost
//     of an if and else is paid before the if. A function that no export,
//     table, reference or start names is entered only by call or
//     return_call, so the region holding each call pays for the callee's
//     entry region. A cost moved this way is paid whenever its code runs,
//     and also when the paying region branches or returns before it.
//   - At each loop header (which costs at least 1 per iteration), and at
//     the entry of the functions a recursion could pass through, after the
//     subtraction, the code calls the import if the fuel is negative. The
//     host then either refills the global (through api.MutableGlobal) and
//     returns, so the guest goes on where it was, or ends the run, for
//     example by panicking with an error, which wazero returns from the
//     call.
//   - A function checks on entry if it is on a cycle of direct calls, or
//     if it makes calls and a table, reference, export or the start
//     function names it (every other recursion passes through one of
//     those). Any other function that makes calls checks only if what it
//     may run before the next check, its callees included, could cost more
//     than 10,000. So the small helpers a hot path calls most do not hold
//     a check, whose call out of line makes wazero's code for the whole
//     function slower.
//
// As the global starts at 0, the guest asks for fuel at the first check
// after it has done any work, which may be in the start function during
// instantiation: the host grants the budget from out_of_fuel (see the
// example). The fuel a run used is the sum of what the host granted minus the
// final value of the global. The global may end below zero: between two
// checks the guest starts no loop iteration and enters no function that
// could recur, but it does not stop at zero either.
//
// Adding the import shifts the index of every function the module defines
// by one; Instrument fixes every reference: calls, ref.func, element
// segments, table and global initialisers, exports, the start function and
// the function, local and label names of the "name" section. It drops the
// DWARF sections (".debug*"), whose code offsets no longer hold.
package fuel

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

const (
	// ImportModule is the module name of the function the guest calls when
	// its fuel is negative.
	ImportModule = "fumehood"
	// ImportName is the name of the function the guest calls when its fuel
	// is negative. It has no parameters and no results.
	ImportName = "out_of_fuel"
	// GlobalName is the export name of the mutable i64 global that holds
	// the remaining fuel.
	GlobalName = "fumehood_fuel"
)

// ErrInstrumented reports a module that already imports ImportModule.ImportName
// or exports GlobalName, such as the output of Instrument.
var ErrInstrumented = errors.New("fuel: module is already instrumented")

// ErrUnsupported reports a module that uses what the instrumenter does not
// know how to meter, such as a type section entry that is not a function
// type.
var ErrUnsupported = errors.New("fuel: unsupported module")

// Binary encodings used below.
const (
	funcType    = 0x60
	externFunc  = 0x00
	externGlob  = 0x03
	valI64      = 0x7E
	mutable     = 0x01
	opEnd       = 0x0B
	opI64Const  = 0x42
	opGlobalGet = 0x23
	opGlobalSet = 0x24
)

// Instrument returns a copy of the binary module wasm with fuel metering
// added, as the package documentation describes. It does not modify wasm.
//
// Input whose structure it cannot follow is an error wrapping
// wasmbin.ErrNotWasm or wasmbin.ErrMalformed; a module already instrumented
// is an error wrapping ErrInstrumented. Instrument checks only what it reads:
// a module that is invalid in other ways stays invalid, for the runtime to
// reject.
func Instrument(wasm []byte) ([]byte, error) {
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return nil, err
	}
	in := &instrumenter{}
	if err := in.instrument(m); err != nil {
		return nil, err
	}
	return m.Encode(), nil
}

// instrumenter holds what the rewrite of one module needs.
type instrumenter struct {
	importedFuncs   uint32 // function imports before ours; our index
	importedGlobals uint32
	fuelGlobal      uint32 // index of the fuel global

	// Scratch space reused across function bodies.
	events []event
	preds  []int // predecessors of regions, see event

	// What the first pass over the code section found, by defined
	// function: the cost of its entry region, and whether it calls any
	// function (only such a function can recur).
	entryCost []int64
	calls     []bool
	escaped   map[uint32]bool // see escape

	sigs      []string // by type index, the encoding of its signature
	funcTypes []uint32 // by defined function, its type index
	bodyCost  []int64  // by defined function, the cost of all its code
	sites     [][]site // by defined function, the calls it makes
	checked   []bool   // by defined function, whether it checks on entry
	scanSites []site   // the calls of the function being scanned, in the first pass

	cost       int64 // the cost of all the code of the function scanned last
	makesCalls bool  // the function being scanned calls a function
	entryCheck bool  // the function being emitted checks on entry
	frames     []frame
	body       []byte
	charge     []byte // global.get $fuel; i64.const; the cost goes after
	sub        []byte // i64.sub; global.set $fuel
	check      []byte // the test and the call to out_of_fuel
}

func (in *instrumenter) instrument(m *wasmbin.Module) error {
	typeIdx, err := in.types(m)
	if err != nil {
		return err
	}
	if err := in.imports(m, typeIdx); err != nil {
		return err
	}
	if err := in.globals(m); err != nil {
		return err
	}
	if err := in.functions(m); err != nil {
		return err
	}
	if err := in.exports(m); err != nil {
		return err
	}
	kept := m.Sections[:0]
	for _, s := range m.Sections {
		var err error
		switch {
		case s.ID == wasmbin.SectionStart:
			s.Payload, err = wasmbin.RemapStart(s.Payload, in.funcIndex)
		case s.ID == wasmbin.SectionTable:
			s.Payload, err = wasmbin.RemapTables(s.Payload, in.funcIndex)
		case s.ID == wasmbin.SectionElement:
			s.Payload, err = wasmbin.RemapElements(s.Payload, in.funcIndex)
		case s.ID == wasmbin.SectionCode:
			s.Payload, err = in.code(s.Payload)
		case s.ID == wasmbin.SectionCustom && strings.HasPrefix(s.Name, ".debug"):
			continue
		case s.ID == wasmbin.SectionCustom && s.Name == "name":
			var ok bool
			if s.Payload, ok = in.names(s.Payload); !ok {
				continue // a name section we cannot follow would name the wrong functions
			}
		}
		if err != nil {
			return fmt.Errorf("fuel: section %d: %w", s.ID, err)
		}
		kept = append(kept, s)
	}
	m.Sections = kept
	return nil
}

// funcIndex maps a function index of the input to the output.
func (in *instrumenter) funcIndex(i uint32) (uint32, error) {
	if i < in.importedFuncs {
		return i, nil
	}
	if i == math.MaxUint32 {
		return 0, fmt.Errorf("%w: function index %d out of range", wasmbin.ErrMalformed, i)
	}
	in.escape(i)
	return i + 1, nil
}

// escape records that the defined function i (an input index) may be
// called other than by call or return_call: through a table, a reference,
// an export or as the start function. Every use of a function index but
// those two instructions goes through funcIndex, which calls escape.
func (in *instrumenter) escape(i uint32) {
	if in.escaped == nil {
		in.escaped = make(map[uint32]bool)
	}
	in.escaped[i] = true
}

// types returns the index of a [] -> [] function type, adding one if needed.
func (in *instrumenter) types(m *wasmbin.Module) (uint32, error) {
	s := m.Section(wasmbin.SectionType)
	if s == nil {
		m.Insert(wasmbin.Section{ID: wasmbin.SectionType, Payload: []byte{1, funcType, 0, 0}})
		return 0, nil
	}
	r := reader{B: s.Payload}
	n := r.Count(3)
	entries := r.Pos
	found := false
	var idx uint32
	for i := uint32(0); i < n && r.Err == nil; i++ {
		if form := r.Byte(); form != funcType && r.Err == nil {
			return 0, fmt.Errorf("%w: type %d: form 0x%02x", ErrUnsupported, i, form)
		}
		start := r.Pos
		params := r.Count(1)
		for j := uint32(0); j < params; j++ {
			r.ValType()
		}
		results := r.Count(1)
		for j := uint32(0); j < results; j++ {
			r.ValType()
		}
		if r.Err != nil {
			break
		}
		in.sigs = append(in.sigs, string(r.B[start:r.Pos]))
		if params == 0 && results == 0 && !found {
			found, idx = true, i
		}
	}
	if r.Err == nil && r.Pos != len(r.B) {
		r.Fail("%d bytes after the last type", len(r.B)-r.Pos)
	}
	if r.Err != nil {
		return 0, fmt.Errorf("fuel: type section: %w", r.Err)
	}
	if found {
		return idx, nil
	}
	p := wasmbin.AppendU32(make([]byte, 0, len(r.B)+8), n+1)
	p = append(p, r.B[entries:]...)
	s.Payload = append(p, funcType, 0, 0)
	return n, nil
}

// imports counts the imported functions and globals and appends the
// out_of_fuel import after the others.
func (in *instrumenter) imports(m *wasmbin.Module, typeIdx uint32) error {
	entry := appendName(nil, ImportModule)
	entry = appendName(entry, ImportName)
	entry = append(entry, externFunc)
	entry = wasmbin.AppendU32(entry, typeIdx)

	s := m.Section(wasmbin.SectionImport)
	if s == nil {
		m.Insert(wasmbin.Section{ID: wasmbin.SectionImport, Payload: append([]byte{1}, entry...)})
		return nil
	}
	imports, err := wasmbin.Imports(s.Payload)
	if err != nil {
		return fmt.Errorf("fuel: import section: %w", err)
	}
	for _, im := range imports {
		if im.Module == ImportModule && im.Name == ImportName {
			return fmt.Errorf("%w: it imports %s.%s", ErrInstrumented, ImportModule, ImportName)
		}
		switch im.Kind {
		case wasmbin.ImportFunc:
			in.importedFuncs++
		case wasmbin.ImportGlobal:
			in.importedGlobals++
		}
	}
	_, entries, _ := wasmbin.U32(s.Payload) // the count
	n := uint32(len(imports))
	p := wasmbin.AppendU32(make([]byte, 0, len(s.Payload)+len(entry)+5), n+1)
	p = append(p, s.Payload[entries:]...)
	s.Payload = append(p, entry...)
	return nil
}

// globals fixes ref.func in the initialisers and appends the fuel global.
func (in *instrumenter) globals(m *wasmbin.Module) error {
	fuel := []byte{valI64, mutable, opI64Const, 0, opEnd}
	s := m.Section(wasmbin.SectionGlobal)
	if s == nil {
		in.fuelGlobal = in.importedGlobals
		m.Insert(wasmbin.Section{ID: wasmbin.SectionGlobal, Payload: append([]byte{1}, fuel...)})
		return nil
	}
	r := reader{B: s.Payload}
	n := r.Count(3)
	p := wasmbin.AppendU32(make([]byte, 0, len(r.B)+16), n+1)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		start := r.Pos
		r.ValType()
		r.Byte()
		p = append(p, r.B[start:r.Pos]...)
		p = wasmbin.RemapConstExpr(p, &r, in.funcIndex)
	}
	if r.Err == nil && r.Pos != len(r.B) {
		r.Fail("%d bytes after the last global", len(r.B)-r.Pos)
	}
	if r.Err != nil {
		return fmt.Errorf("fuel: global section: %w", r.Err)
	}
	in.fuelGlobal = in.importedGlobals + n
	s.Payload = append(p, fuel...)
	return nil
}

// exports fixes function exports and exports the fuel global.
func (in *instrumenter) exports(m *wasmbin.Module) error {
	entry := appendName(nil, GlobalName)
	entry = append(entry, externGlob)
	entry = wasmbin.AppendU32(entry, in.fuelGlobal)

	s := m.Section(wasmbin.SectionExport)
	if s == nil {
		m.Insert(wasmbin.Section{ID: wasmbin.SectionExport, Payload: append([]byte{1}, entry...)})
		return nil
	}
	r := reader{B: s.Payload}
	n := r.Count(3)
	p := wasmbin.AppendU32(make([]byte, 0, len(r.B)+len(entry)+8), n+1)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		start := r.Pos
		name := r.Name()
		if string(name) == GlobalName {
			return fmt.Errorf("%w: it exports %s", ErrInstrumented, GlobalName)
		}
		kind := r.Byte()
		p = append(p, r.B[start:r.Pos]...)
		idx := r.U32()
		if kind == externFunc && r.Err == nil {
			var err error
			if idx, err = in.funcIndex(idx); err != nil {
				return fmt.Errorf("fuel: export %q: %w", name, err)
			}
		}
		p = wasmbin.AppendU32(p, idx)
	}
	if r.Err == nil && r.Pos != len(r.B) {
		r.Fail("%d bytes after the last export", len(r.B)-r.Pos)
	}
	if r.Err != nil {
		return fmt.Errorf("fuel: export section: %w", r.Err)
	}
	s.Payload = append(p, entry...)
	return nil
}

func appendName(b []byte, s string) []byte {
	b = wasmbin.AppendU32(b, uint32(len(s)))
	return append(b, s...)
}

// functions reads the type index of every defined function.
func (in *instrumenter) functions(m *wasmbin.Module) error {
	s := m.Section(wasmbin.SectionFunction)
	if s == nil {
		return nil
	}
	r := reader{B: s.Payload}
	n := r.Count(1)
	in.funcTypes = make([]uint32, 0, n)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		in.funcTypes = append(in.funcTypes, r.U32())
	}
	r.End("function section")
	if r.Err != nil {
		return fmt.Errorf("fuel: function section: %w", r.Err)
	}
	return nil
}
