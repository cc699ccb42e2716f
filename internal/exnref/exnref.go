// Package exnref rewrites WebAssembly's legacy exception-handling
// instructions (try, catch, catch_all, delegate, rethrow), which clang 19
// emits for -fwasm-exceptions, into the form of the exception-handling
// proposal as standardised (try_table, throw_ref and exnref), the only one
// wazero runs.
//
// A try with catch clauses
//
//	try bt  body  catch $t1 h1 ... catch_all hn  end
//
// becomes a block for its results, one block per clause for what the
// clause leaves on the stack, and a try_table whose clauses branch to them:
//
//	block bt                                   ;; the try's label
//	  block (result exnref) ...                ;; catch_all_ref
//	    block (result <params of $t1> exnref)  ;; catch_ref $t1
//	      try_table bt (catch_ref $t1 0) ... (catch_all_ref n-1)
//	        body
//	      end
//	      br <the try's label>
//	    end
//	    local.set $exn  h1  br <the try's label>
//	  ...
//	  end
//	  local.set $exn  hn
//	end
//
// The _ref forms and the local are used only for a try that some rethrow
// names; rethrow becomes local.get $exn throw_ref. A try ... delegate l
// becomes a try_table whose catch_all_ref hands the exception to a br to a
// block that the translation opens around the body of the try that l names
// (or around the whole function body, when l names the caller), after
// which a throw_ref throws it again, inside that try's body: so its catch
// clauses see it, as delegate's do. A delegate whose label names another
// kind of block, or a catch handler, is resolved to the nearest try body
// (or the function) around that block, whose handlers are the ones the
// exception meets there.
//
// Two bugs of wazero v1.12.0's compiler shape the output. A catch clause
// that branches past another try_table leaves that try_table's handler in
// force, so delegated exceptions travel by br, which leaves it. And a
// handler sees locals as they were when the try_table was entered: see
// spill.go for the work-around.
//
// Every label of the function's other branches is renumbered for the blocks
// added. Functions without legacy instructions are copied unchanged, and a
// module without any is returned as is. New block types go at the end of
// the type section, new locals (one exnref per nesting depth of try, only
// in functions that rethrow) after the function's own. DWARF sections and
// the label names of the "name" section are dropped from a module that
// changed, as their offsets and label indices no longer hold.
package exnref

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// ErrUnsupported reports legacy exception handling that Translate cannot
// rewrite: a try whose block type takes parameters, or a delegate whose
// target block takes parameters.
var ErrUnsupported = errors.New("exnref: unsupported legacy exception handling")

// Opcodes and encodings the translation reads or writes.
const (
	opBlock      = 0x02
	opLoop       = 0x03
	opIf         = 0x04
	opElse       = 0x05
	opTry        = 0x06
	opCatch      = 0x07
	opThrowRef   = 0x0A
	opEnd        = 0x0B
	opBr         = 0x0C
	opBrIf       = 0x0D
	opBrTable    = 0x0E
	opRethrow    = 0x09
	opDelegate   = 0x18
	opCatchAll   = 0x19
	opTryTable   = 0x1F
	opLocalGet   = 0x20
	opLocalSet   = 0x21
	opBrOnNull   = 0xD5
	opBrOnNonNul = 0xD6

	blockEmpty = 0x40
	valExnref  = 0x69
	funcType   = 0x60

	clauseCatch       = 0x00
	clauseCatchRef    = 0x01
	clauseCatchAll    = 0x02
	clauseCatchAllRef = 0x03
)

// Translate returns wasm with its legacy exception handling rewritten, as
// the package documentation describes. A module without legacy
// instructions is returned as is (the same slice), once its tags were
// checked (wasmbin.CheckTags). Input whose structure
// Translate cannot follow is an error wrapping wasmbin.ErrNotWasm or
// wasmbin.ErrMalformed; Translate checks only what it reads, so a module
// invalid in other ways stays invalid, for the runtime to reject.
func Translate(wasm []byte) ([]byte, error) {
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return nil, err
	}
	if err := wasmbin.CheckTags(m); err != nil {
		return nil, err
	}
	code := m.Section(wasmbin.SectionCode)
	if code == nil {
		return wasm, nil
	}
	t := &translator{}
	if err := t.readModule(m); err != nil {
		return nil, err
	}
	payload, changed, err := t.code(code.Payload)
	if err != nil {
		return nil, err
	}
	if !changed {
		return wasm, nil
	}
	code.Payload = payload
	if t.newTypes > 0 {
		ts := m.Section(wasmbin.SectionType)
		p := wasmbin.AppendU32(nil, uint32(len(t.types)))
		for _, e := range t.types {
			p = append(p, e...)
		}
		if ts == nil {
			m.Insert(wasmbin.Section{ID: wasmbin.SectionType, Payload: p})
		} else {
			ts.Payload = p
		}
	}
	kept := m.Sections[:0]
	for _, s := range m.Sections {
		if s.ID == wasmbin.SectionCustom {
			if strings.HasPrefix(s.Name, ".debug") {
				continue
			}
			if s.Name == "name" {
				s.Payload = dropLabelNames(s.Payload)
			}
		}
		kept = append(kept, s)
	}
	m.Sections = kept
	return m.Encode(), nil
}

// Uses reports whether wasm, a module that wasmbin.Parse accepts, declares
// or imports a tag, which every module that throws must: it is how a
// caller tells a module that needs exception handling without reading its
// code. A module that is not one reports false.
func Uses(wasm []byte) bool {
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return false
	}
	if m.Section(wasmbin.SectionTag) != nil {
		return true
	}
	if s := m.Section(wasmbin.SectionImport); s != nil {
		imports, _ := wasmbin.Imports(s.Payload)
		for _, im := range imports {
			if im.Kind == wasmbin.ImportTag {
				return true
			}
		}
	}
	return false
}

// sig is a function type: its parameter and result types, each a value
// type's encoding.
type sig struct {
	params, results [][]byte
}

// translator holds what the rewrite of one module needs.
type translator struct {
	types     [][]byte       // every type entry's encoding, new ones included
	sigs      []sig          // by type index, the function types (nil params for other forms)
	typeIndex map[string]int // a function type's encoding: its index
	newTypes  int
	funcTypes []uint32 // by function index, imports first
	tagTypes  []uint32 // by tag index, imports first
	imported  uint32   // imported functions
	sp        uint32   // the C stack pointer global, if spOK
	spOK      bool

	f fn // the function being translated
}

// readModule reads the types, the functions' types and the tags' types.
func (t *translator) readModule(m *wasmbin.Module) error {
	t.typeIndex = map[string]int{}
	t.sp, _, t.spOK = wasmbin.StackPointer(m)
	if s := m.Section(wasmbin.SectionType); s != nil {
		r := wasmbin.Reader{B: s.Payload}
		n := r.Count(1)
		for i := uint32(0); i < n && r.Err == nil; i++ {
			start := r.Pos
			if form := r.Byte(); form != funcType {
				if r.Err == nil {
					r.Fail("type %d: unsupported form 0x%02x", i, form)
				}
				break
			}
			var sg sig
			for _, list := range []*[][]byte{&sg.params, &sg.results} {
				k := r.Count(1)
				for j := uint32(0); j < k && r.Err == nil; j++ {
					at := r.Pos
					r.ValType()
					*list = append(*list, r.B[at:r.Pos])
				}
			}
			entry := r.B[start:r.Pos]
			t.types = append(t.types, entry)
			t.sigs = append(t.sigs, sg)
			if _, ok := t.typeIndex[string(entry)]; !ok {
				t.typeIndex[string(entry)] = int(i)
			}
		}
		r.End("type")
		if r.Err != nil {
			return fmt.Errorf("exnref: type section: %w", r.Err)
		}
	}
	if s := m.Section(wasmbin.SectionImport); s != nil {
		imports, err := wasmbin.Imports(s.Payload)
		if err != nil {
			return fmt.Errorf("exnref: import section: %w", err)
		}
		for _, im := range imports {
			switch im.Kind {
			case wasmbin.ImportFunc:
				t.funcTypes = append(t.funcTypes, im.Type)
			case wasmbin.ImportTag:
				t.tagTypes = append(t.tagTypes, im.Type)
			}
		}
		t.imported = uint32(len(t.funcTypes))
	}
	if s := m.Section(wasmbin.SectionFunction); s != nil {
		r := wasmbin.Reader{B: s.Payload}
		n := r.Count(1)
		for i := uint32(0); i < n && r.Err == nil; i++ {
			t.funcTypes = append(t.funcTypes, r.U32())
		}
		r.End("function")
		if r.Err != nil {
			return fmt.Errorf("exnref: function section: %w", r.Err)
		}
	}
	if s := m.Section(wasmbin.SectionTag); s != nil {
		tags, err := wasmbin.Tags(s.Payload)
		if err != nil {
			return fmt.Errorf("exnref: tag section: %w", err)
		}
		t.tagTypes = append(t.tagTypes, tags...)
	}
	return nil
}

// blockType returns the encoding of a block type whose results are
// results and that takes no parameters, adding a type if it needs one.
func (t *translator) blockType(results [][]byte) []byte {
	switch len(results) {
	case 0:
		return []byte{blockEmpty}
	case 1:
		return results[0]
	}
	e := []byte{funcType, 0}
	e = wasmbin.AppendU32(e, uint32(len(results)))
	for _, v := range results {
		e = append(e, v...)
	}
	idx, ok := t.typeIndex[string(e)]
	if !ok {
		idx = len(t.types)
		t.types = append(t.types, e)
		t.sigs = append(t.sigs, sig{results: results})
		t.typeIndex[string(e)] = idx
		t.newTypes++
	}
	return wasmbin.AppendS64(nil, int64(idx))
}

// tagParams returns the parameter types of tag i.
func (t *translator) tagParams(i uint32) ([][]byte, error) {
	if i >= uint32(len(t.tagTypes)) {
		return nil, fmt.Errorf("%w: tag %d is not defined", wasmbin.ErrMalformed, i)
	}
	ty := t.tagTypes[i]
	if ty >= uint32(len(t.sigs)) {
		return nil, fmt.Errorf("%w: tag %d has type %d, which is not defined", wasmbin.ErrMalformed, i, ty)
	}
	return t.sigs[ty].params, nil
}

// noParams checks that the block type bt (its encoding) takes no
// parameters, so the blocks the translation opens inside a block of that
// type need none.
func (t *translator) noParams(bt []byte) error {
	if len(bt) == 0 || bt[0] >= blockEmpty && bt[0] < 0x80 {
		return nil // empty, or a value type: a one-byte negative s33
	}
	idx, _, err := wasmbin.S33(bt)
	if err != nil || idx < 0 || idx >= int64(len(t.sigs)) {
		return fmt.Errorf("%w: block type %d is not defined", wasmbin.ErrMalformed, idx)
	}
	if len(t.sigs[idx].params) > 0 {
		return fmt.Errorf("%w: a try or delegate target whose block type takes parameters", ErrUnsupported)
	}
	return nil
}

// code translates every function body of the code section.
func (t *translator) code(payload []byte) ([]byte, bool, error) {
	r := wasmbin.Reader{B: payload}
	n := r.Count(2)
	if r.Err == nil && uint64(t.imported)+uint64(n) != uint64(len(t.funcTypes)) {
		return nil, false, fmt.Errorf("%w: %d function bodies for %d functions", wasmbin.ErrMalformed, n, len(t.funcTypes)-int(t.imported))
	}
	out := wasmbin.AppendU32(make([]byte, 0, len(payload)+len(payload)/16), n)
	changed := false
	for i := uint32(0); i < n && r.Err == nil; i++ {
		body := r.Bytes(r.U32())
		if r.Err != nil {
			break
		}
		b, ok, err := t.function(body, t.funcTypes[t.imported+i])
		if err != nil {
			return nil, false, fmt.Errorf("exnref: function body %d: %w", i, err)
		}
		if !ok {
			b = body
		}
		changed = changed || ok
		out = wasmbin.AppendU32(out, uint32(len(b)))
		out = append(out, b...)
	}
	r.End("function body")
	if r.Err != nil {
		return nil, false, fmt.Errorf("exnref: code section: %w", r.Err)
	}
	return out, changed, nil
}

// dropLabelNames returns a "name" section payload without its label names
// (subsection 3), or the payload as is if it cannot follow it.
func dropLabelNames(payload []byte) []byte {
	const labels = 3
	r := wasmbin.Reader{B: payload}
	out := make([]byte, 0, len(payload))
	for !r.Done() {
		start := r.Pos
		id := r.Byte()
		r.Bytes(r.U32())
		if r.Err != nil {
			return payload
		}
		if id != labels {
			out = append(out, r.B[start:r.Pos]...)
		}
	}
	return out
}
