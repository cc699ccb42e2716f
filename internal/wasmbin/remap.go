package wasmbin

import "fmt"

// FuncMap maps a function index of an input module to the index the same
// function has in the output, or fails for an index it cannot map. Passes
// that add or redirect functions (the fuel and errno rewriters) give one to
// the Remap functions below, which copy a section and fix every function
// index outside the code.
type FuncMap func(uint32) (uint32, error)

// RemapConstExpr copies the constant expression at r to p, mapping the
// index of each ref.func.
func RemapConstExpr(p []byte, r *Reader, f FuncMap) []byte {
	for r.Err == nil {
		ins, err := DecodeInstr(r.B[r.Pos:])
		if err != nil {
			r.Fail("constant expression at offset %d: %v", r.Pos, err)
			return p
		}
		if ins.Op == OpRefFunc {
			idx, err := f(ins.Index)
			if err != nil {
				r.Fail("ref.func: %v", err)
				return p
			}
			p = append(p, byte(OpRefFunc))
			p = AppendU32(p, idx)
		} else {
			p = append(p, r.B[r.Pos:r.Pos+ins.Len]...)
		}
		r.Pos += ins.Len
		if ins.Op == OpEnd {
			break
		}
	}
	return p
}

// RemapStart returns the payload of a start section with its function
// index mapped.
func RemapStart(payload []byte, f FuncMap) ([]byte, error) {
	r := Reader{B: payload}
	idx := r.U32()
	r.End("start function")
	if r.Err != nil {
		return nil, r.Err
	}
	idx, err := f(idx)
	if err != nil {
		return nil, err
	}
	return AppendU32(nil, idx), nil
}

// RemapTables returns the payload of a table section with ref.func mapped
// in its initialisers (typed function references).
func RemapTables(payload []byte, f FuncMap) ([]byte, error) {
	r := Reader{B: payload}
	n := r.Count(3)
	p := make([]byte, 0, len(payload)+8)
	p = append(p, payload[:r.Pos]...)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		start := r.Pos
		init := false
		if r.Pos < len(r.B) && r.B[r.Pos] == 0x40 {
			r.Pos++
			if r.Byte() != 0 {
				r.Fail("table %d: reserved byte is not zero", i)
				break
			}
			init = true
		}
		r.ValType()
		r.Limits()
		p = append(p, r.B[start:r.Pos]...)
		if init {
			p = RemapConstExpr(p, &r, f)
		}
	}
	r.End("table")
	return p, r.Err
}

// RemapElements returns the payload of an element section with its
// function indices and ref.func mapped.
func RemapElements(payload []byte, f FuncMap) ([]byte, error) {
	r := Reader{B: payload}
	n := r.Count(2)
	p := make([]byte, 0, len(payload)+len(payload)/8+8)
	p = append(p, payload[:r.Pos]...)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		start := r.Pos
		flags := r.U32()
		if flags > 7 {
			r.Fail("element segment %d: unknown flags %d", i, flags)
			break
		}
		if flags&1 == 0 { // active
			if flags&2 != 0 {
				r.U32() // table index
			}
			p = append(p, r.B[start:r.Pos]...)
			p = RemapConstExpr(p, &r, f) // offset
			start = r.Pos
		}
		if flags&3 != 0 {
			if flags&4 == 0 {
				r.Byte() // element kind
			} else {
				r.ValType() // reference type
			}
		}
		count := r.Count(1)
		p = append(p, r.B[start:r.Pos]...)
		for j := uint32(0); j < count && r.Err == nil; j++ {
			if flags&4 != 0 {
				p = RemapConstExpr(p, &r, f)
				continue
			}
			idx, err := f(r.U32())
			if err != nil {
				return nil, err
			}
			p = AppendU32(p, idx)
		}
	}
	r.End("element segment")
	return p, r.Err
}

// Import kinds.
const (
	ImportFunc   = 0x00
	ImportTable  = 0x01
	ImportMemory = 0x02
	ImportGlobal = 0x03
	ImportTag    = 0x04
)

// Import is one entry of an import section.
type Import struct {
	Module, Name string
	Kind         byte
	// Type is a function or tag import's type index.
	Type uint32
}

// Imports decodes the payload of an import section.
func Imports(payload []byte) ([]Import, error) {
	r := Reader{B: payload}
	n := r.Count(4)
	var out []Import
	for i := uint32(0); i < n && r.Err == nil; i++ {
		im := Import{Module: string(r.Name()), Name: string(r.Name()), Kind: r.Byte()}
		switch im.Kind {
		case ImportFunc: // type index
			im.Type = r.U32()
		case ImportTable: // reference type, limits
			r.ValType()
			r.Limits()
		case ImportMemory: // limits
			r.Limits()
		case ImportGlobal: // value type, mutability
			r.ValType()
			r.Byte()
		case ImportTag: // attribute, type index
			r.Byte()
			im.Type = r.U32()
		default:
			r.Fail("import %d: unknown kind 0x%02x", i, im.Kind)
		}
		out = append(out, im)
	}
	r.End("import")
	return out, r.Err
}

// Tags decodes the payload of a tag section: the type index of each tag.
// Every tag's attribute must be 0, an exception.
func Tags(payload []byte) ([]uint32, error) {
	r := Reader{B: payload}
	n := r.Count(2)
	tags := make([]uint32, 0, n)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		if a := r.Byte(); a != 0 && r.Err == nil {
			r.Fail("tag %d: unknown attribute %d", i, a)
		}
		tags = append(tags, r.U32())
	}
	r.End("tag")
	return tags, r.Err
}

// StackPointer returns the index and initial value of a module's C stack
// pointer by the convention of LLVM's wasm-ld (which every C, C++ and Rust
// WASI toolchain uses): the first global the module defines, a mutable i32
// initialised by an i32.const. ok is false for a module that does not
// follow it.
func StackPointer(m *Module) (index uint32, init int32, ok bool) {
	var imported uint32
	if s := m.Section(SectionImport); s != nil {
		imps, err := Imports(s.Payload)
		if err != nil {
			return 0, 0, false
		}
		for _, im := range imps {
			if im.Kind == ImportGlobal {
				imported++
			}
		}
	}
	s := m.Section(SectionGlobal)
	if s == nil {
		return 0, 0, false
	}
	r := &Reader{B: s.Payload}
	if r.Count(3) == 0 {
		return 0, 0, false
	}
	typ := r.ValType()
	mutable := r.Byte() == 1
	if r.Err != nil || typ != 0x7F || !mutable || r.Byte() != 0x41 { // i32, mut, i32.const
		return 0, 0, false
	}
	v, n, err := S32(r.Rest())
	if err != nil {
		return 0, 0, false
	}
	r.Pos += n
	if r.Byte() != 0x0B || r.Err != nil {
		return 0, 0, false
	}
	return imported, v, true
}

// CheckTags checks that every tag a module imports or defines names a type
// the type section has. wazero v1.12 does not check it before it reads the
// type (it panics when the index is out of range), so modules are checked
// here before wazero sees them.
func CheckTags(m *Module) error {
	var types uint32
	if s := m.Section(SectionType); s != nil {
		r := Reader{B: s.Payload}
		types = r.U32()
	}
	var tags []uint32
	if s := m.Section(SectionImport); s != nil {
		imports, err := Imports(s.Payload)
		if err != nil {
			return err
		}
		for _, im := range imports {
			if im.Kind == ImportTag {
				tags = append(tags, im.Type)
			}
		}
	}
	if s := m.Section(SectionTag); s != nil {
		defined, err := Tags(s.Payload)
		if err != nil {
			return err
		}
		tags = append(tags, defined...)
	}
	for i, t := range tags {
		if t >= types {
			return fmt.Errorf("%w: tag %d has type %d, which is not defined", ErrMalformed, i, t)
		}
	}
	return nil
}
