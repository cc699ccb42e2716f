// Package emeh prepares WebAssembly modules that use C++ exceptions the
// Emscripten way (clang's -mllvm -enable-emscripten-cxx-exceptions, with
// internal/cxxrt's runtime) for the sandbox, which implements their
// imports.
//
// Such a module imports, from module "env", one invoke_<sig> function for
// each signature of call that may throw: its first parameter is the
// callee's index in the module's function table, the rest are the
// callee's arguments. It imports env.fumehood_unwind, which a throw calls
// after recording the exception and setting the module's __THREW__
// variable: the host ends its innermost invoke there, and the code after
// that invoke finds __THREW__ set and runs its landing pad.
//
// To call the callee, the host needs an export: Prepare adds, for each
// imported invoke_<sig>, an exported function fumehood_dyncall_<sig> that
// calls its first argument through table 0 with the others
// (call_indirect), so the host's invoke is one call of that export.
package emeh

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

const (
	// ImportModule is the module the invoke and unwind functions are
	// imported from.
	ImportModule = "env"
	// UnwindName is the import a throw calls: the host ends the innermost
	// invoke and does not return.
	UnwindName = "fumehood_unwind"
	// InvokePrefix starts the names of the imported invoke functions.
	InvokePrefix = "invoke_"
	// DyncallPrefix starts the names of the functions Prepare exports, one
	// for each invoke import: DyncallPrefix + the import's name without
	// InvokePrefix.
	DyncallPrefix = "fumehood_dyncall_"
)

// ErrPrepared reports a module that already exports a name Prepare would
// add: one prepared before, or one whose exports could stand in for
// Prepare's.
var ErrPrepared = errors.New("emeh: the module already exports " + DyncallPrefix + " functions")

// ErrInvoke reports an invoke import whose type is not one an invoke can
// have: its first parameter, the table index, must be an i32.
var ErrInvoke = errors.New("emeh: invoke import of an unusable type")

// Invoke is one imported invoke function.
type Invoke struct {
	// Name is the import's name, InvokePrefix and the signature.
	Name string
	// Params are the value types of the import's parameters, the table
	// index first; Results are its results'.
	Params, Results []byte
}

// Export is the name of the function Prepare exports for iv.
func (iv Invoke) Export() string { return DyncallPrefix + strings.TrimPrefix(iv.Name, InvokePrefix) }

// Imports is what a module imports of the Emscripten way.
type Imports struct {
	// Invokes are its invoke functions, in the order it imports them.
	Invokes []Invoke
	// Unwind says it imports UnwindName.
	Unwind bool
}

// Uses reports whether the module imports anything of the Emscripten way.
func (im *Imports) Uses() bool { return len(im.Invokes) > 0 || im.Unwind }

// funcType is a function type's parameter and result types.
type funcType struct{ params, results []byte }

func (t funcType) equal(u funcType) bool {
	return bytes.Equal(t.params, u.params) && bytes.Equal(t.results, u.results)
}

// module is what Find and Prepare read of a module.
type module struct {
	types       []funcType
	typesErr    error // a type form readTypes does not know, found before the end
	imports     Imports
	importedFns uint32
	tableImport bool // the module imports a table
	// invokeTypes are the invokes' type indices, by Imports.Invokes.
	invokeTypes []uint32
}

// Find lists what m imports of the Emscripten way. An invoke import whose
// type cannot be an invoke's is an error wrapping ErrInvoke; an invoke
// imported twice under one name is refused too, since the host defines
// each name once.
func Find(m *wasmbin.Module) (*Imports, error) {
	mod, err := read(m)
	if err != nil {
		return nil, err
	}
	return &mod.imports, nil
}

func read(m *wasmbin.Module) (*module, error) {
	mod := &module{}
	sec := m.Section(wasmbin.SectionImport)
	if sec == nil {
		return mod, nil
	}
	imports, err := wasmbin.Imports(sec.Payload)
	if err != nil {
		return nil, fmt.Errorf("emeh: import section: %w", err)
	}
	seen := map[string]bool{}
	for _, im := range imports {
		if im.Kind == wasmbin.ImportTable {
			mod.tableImport = true
		}
		if im.Kind != wasmbin.ImportFunc {
			continue
		}
		mod.importedFns++
		if im.Module != ImportModule {
			continue
		}
		switch {
		case im.Name == UnwindName:
			mod.imports.Unwind = true
		case strings.HasPrefix(im.Name, InvokePrefix):
			if seen[im.Name] {
				return nil, fmt.Errorf("%w: %s.%s is imported twice", ErrInvoke, ImportModule, im.Name)
			}
			seen[im.Name] = true
			if mod.types == nil {
				if err := mod.readTypes(m); err != nil {
					return nil, err
				}
			}
			if im.Type >= uint32(len(mod.types)) {
				if mod.typesErr != nil {
					return nil, mod.typesErr
				}
				return nil, fmt.Errorf("emeh: %w: import %s.%s: type %d out of range", wasmbin.ErrMalformed, ImportModule, im.Name, im.Type)
			}
			t := mod.types[im.Type]
			if len(t.params) == 0 || t.params[0] != valI32 || len(t.results) > 1 {
				return nil, fmt.Errorf("%w: %s.%s takes %x and returns %x", ErrInvoke, ImportModule, im.Name, t.params, t.results)
			}
			mod.imports.Invokes = append(mod.imports.Invokes, Invoke{Name: im.Name, Params: t.params, Results: t.results})
			mod.invokeTypes = append(mod.invokeTypes, im.Type)
		}
	}
	return mod, nil
}

const (
	valI32   = 0x7F
	formFunc = 0x60
	// opcodes
	opLocalGet     = 0x20
	opCallIndirect = 0x11
	opEnd          = 0x0B
	externFunc     = 0x00
)

// readTypes reads the type section's function types. It stops at a type
// form it does not know (of the GC proposal, which wazero does not
// support) and records the error, which matters only if an invoke's type
// lies past it.
func (mod *module) readTypes(m *wasmbin.Module) error {
	mod.types = []funcType{}
	sec := m.Section(wasmbin.SectionType)
	if sec == nil {
		return nil
	}
	r := &wasmbin.Reader{B: sec.Payload}
	n := r.Count(3)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		if form := r.Byte(); form != formFunc {
			if r.Err == nil {
				mod.typesErr = fmt.Errorf("emeh: %w: type %d: unsupported form 0x%02x", wasmbin.ErrMalformed, i, form)
			}
			break
		}
		var t funcType
		for _, list := range []*[]byte{&t.params, &t.results} {
			k := r.Count(1)
			for j := uint32(0); j < k && r.Err == nil; j++ {
				start := r.Pos
				r.ValType()
				if r.Err == nil && r.Pos-start != 1 {
					r.Fail("type %d: a value type of %d bytes", i, r.Pos-start)
				}
				if r.Err == nil {
					*list = append(*list, r.B[start])
				}
			}
		}
		mod.types = append(mod.types, t)
	}
	if mod.typesErr == nil {
		r.End("type")
	}
	if r.Err != nil {
		return fmt.Errorf("emeh: type section: %w", r.Err)
	}
	return nil
}

// Prepare returns wasm with an exported dyncall function for each
// imported invoke (see the package doc), or wasm itself if it imports
// none. Input it cannot follow is an error wrapping wasmbin.ErrMalformed;
// a module that exports a dyncall name already is ErrPrepared.
func Prepare(wasm []byte) ([]byte, error) {
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return nil, err
	}
	mod, err := read(m)
	if err != nil {
		return nil, err
	}
	if len(mod.imports.Invokes) == 0 {
		return wasm, nil
	}
	if err := mod.prepare(m); err != nil {
		return nil, err
	}
	return m.Encode(), nil
}

func (mod *module) prepare(m *wasmbin.Module) error {
	if m.Section(wasmbin.SectionTable) == nil && !mod.tableImport {
		return fmt.Errorf("emeh: %w: the module imports invoke functions but has no table", wasmbin.ErrMalformed)
	}
	// The callees' types, added to the type section where missing.
	callee := make([]uint32, len(mod.imports.Invokes))
	var newTypes []byte
	added := uint32(0)
	for i, iv := range mod.imports.Invokes {
		want := funcType{params: iv.Params[1:], results: iv.Results}
		idx := -1
		for j, t := range mod.types {
			if t.equal(want) {
				idx = j
				break
			}
		}
		if idx < 0 {
			if mod.typesErr != nil {
				return mod.typesErr // a type past the unknown form would get the wrong index
			}
			idx = len(mod.types)
			mod.types = append(mod.types, want)
			newTypes = append(newTypes, formFunc)
			newTypes = appendVec(newTypes, want.params)
			newTypes = appendVec(newTypes, want.results)
			added++
		}
		callee[i] = uint32(idx)
	}
	if added > 0 {
		if err := appendEntries(m, wasmbin.SectionType, added, newTypes); err != nil {
			return err
		}
	}
	defined, err := count(m, wasmbin.SectionFunction)
	if err != nil {
		return err
	}
	if err := mod.checkExports(m); err != nil {
		return err
	}
	var funcs, bodies, exports []byte
	n := uint32(len(mod.imports.Invokes))
	for i, iv := range mod.imports.Invokes {
		funcs = wasmbin.AppendU32(funcs, mod.invokeTypes[i])
		var body []byte
		body = append(body, 0) // no locals
		for p := 1; p < len(iv.Params); p++ {
			body = append(body, opLocalGet)
			body = wasmbin.AppendU32(body, uint32(p))
		}
		body = append(body, opLocalGet, 0, opCallIndirect)
		body = wasmbin.AppendU32(body, callee[i])
		body = append(body, 0, opEnd) // table 0
		bodies = wasmbin.AppendU32(bodies, uint32(len(body)))
		bodies = append(bodies, body...)
		name := iv.Export()
		exports = wasmbin.AppendU32(exports, uint32(len(name)))
		exports = append(exports, name...)
		exports = append(exports, externFunc)
		exports = wasmbin.AppendU32(exports, mod.importedFns+defined+uint32(i))
	}
	for _, s := range []struct {
		id      byte
		entries []byte
	}{{wasmbin.SectionFunction, funcs}, {wasmbin.SectionCode, bodies}, {wasmbin.SectionExport, exports}} {
		if err := appendEntries(m, s.id, n, s.entries); err != nil {
			return err
		}
	}
	return nil
}

// checkExports fails with ErrPrepared if m exports a dyncall name.
func (mod *module) checkExports(m *wasmbin.Module) error {
	sec := m.Section(wasmbin.SectionExport)
	if sec == nil {
		return nil
	}
	r := &wasmbin.Reader{B: sec.Payload}
	n := r.Count(3)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		name := r.Name()
		r.Byte()
		r.U32()
		if r.Err == nil && strings.HasPrefix(string(name), DyncallPrefix) {
			return fmt.Errorf("%w: %q", ErrPrepared, name)
		}
	}
	r.End("export")
	if r.Err != nil {
		return fmt.Errorf("emeh: export section: %w", r.Err)
	}
	return nil
}

// count returns the number of entries of m's section id (0 if it has none).
func count(m *wasmbin.Module, id byte) (uint32, error) {
	sec := m.Section(id)
	if sec == nil {
		return 0, nil
	}
	n, _, err := wasmbin.U32(sec.Payload)
	if err != nil {
		return 0, fmt.Errorf("emeh: section %d: %w: %v", id, wasmbin.ErrMalformed, err)
	}
	return n, nil
}

// appendEntries appends n encoded entries to m's vector section id,
// making the section if m has none.
func appendEntries(m *wasmbin.Module, id byte, n uint32, entries []byte) error {
	sec := m.Section(id)
	if sec == nil {
		m.Insert(wasmbin.Section{ID: id, Payload: []byte{0}})
		sec = m.Section(id)
	}
	old, k, err := wasmbin.U32(sec.Payload)
	if err != nil {
		return fmt.Errorf("emeh: section %d: %w: %v", id, wasmbin.ErrMalformed, err)
	}
	if uint64(old)+uint64(n) > 1<<32-1 {
		return fmt.Errorf("emeh: section %d: %w: too many entries", id, wasmbin.ErrMalformed)
	}
	p := wasmbin.AppendU32(make([]byte, 0, 5+len(sec.Payload)-k+len(entries)), old+n)
	p = append(p, sec.Payload[k:]...)
	sec.Payload = append(p, entries...)
	return nil
}

// appendVec appends a vector of value types.
func appendVec(b, types []byte) []byte {
	b = wasmbin.AppendU32(b, uint32(len(types)))
	return append(b, types...)
}
