package wasmbin

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrExportName reports that an export name ExportMutableGlobals wants to
// add is already used by another export.
var ErrExportName = errors.New("wasmbin: export name already taken")

// Extern kinds of imports and exports.
const (
	externFunc   byte = 0x00
	externTable  byte = 0x01
	externMemory byte = 0x02
	externGlobal byte = 0x03
	externTag    byte = 0x04
)

// MutableGlobal describes one mutable global that a module defines (not
// imports).
type MutableGlobal struct {
	// Index is the global's index: imported globals come first.
	Index uint32
	// Type is the global's value type as its first byte: 0x7F i32, 0x7E
	// i64, 0x7D f32, 0x7C f64, 0x7B v128, or a reference type.
	Type byte
	// Export is the first name under which the module exports the global,
	// or "" if it does not export it.
	Export string
}

// MutableGlobals lists the mutable globals that m defines, in index order,
// with the name each is exported under. Together with linear memory they
// are the whole state of an idle instance. It reads the import, global and
// export sections and changes nothing.
//
// Input whose sections MutableGlobals cannot follow is an error wrapping
// ErrMalformed.
func MutableGlobals(m *Module) ([]MutableGlobal, error) {
	g, err := readGlobals(m)
	if err != nil {
		return nil, err
	}
	return g.mutable, nil
}

// ExportMutableGlobals exports every mutable global that m defines and does
// not export yet, under the name prefix followed by the global's index in
// decimal (such as "fumehood_global_3"). Among them are the stack pointer
// and, after Binaryen's asyncify, its two globals, which asyncify does not
// export: a host can read and write only exported globals.
//
// It returns one export name per mutable defined global, in index order:
// the existing name of a global that was already exported, else the new
// one. It rewrites only the export section (adding one if there is none),
// and only when it adds an export; running it again adds nothing and
// returns the same names, so it also serves to learn the names.
//
// Input whose sections it cannot follow is an error wrapping ErrMalformed; a
// new name that another export already uses is an error wrapping
// ErrExportName. On error m is unchanged.
func ExportMutableGlobals(m *Module, prefix string) ([]string, error) {
	g, err := readGlobals(m)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(g.mutable))
	var added []byte
	n := 0
	for i, mg := range g.mutable {
		if mg.Export != "" {
			names[i] = mg.Export
			continue
		}
		name := prefix + strconv.FormatUint(uint64(mg.Index), 10)
		if _, taken := g.exportNames[name]; taken {
			return nil, fmt.Errorf("%w: %q (global %d)", ErrExportName, name, mg.Index)
		}
		g.exportNames[name] = struct{}{}
		names[i] = name
		added = AppendU32(added, uint32(len(name)))
		added = append(added, name...)
		added = append(added, externGlobal)
		added = AppendU32(added, mg.Index)
		n++
	}
	if n == 0 {
		return names, nil
	}
	total := uint64(g.exports) + uint64(n)
	if total > 1<<32-1 {
		return nil, fmt.Errorf("%w: too many exports", ErrMalformed)
	}
	p := AppendU32(make([]byte, 0, 5+len(g.exportEntries)+len(added)), uint32(total))
	p = append(p, g.exportEntries...)
	p = append(p, added...)
	if s := m.Section(SectionExport); s != nil {
		s.Payload = p
	} else {
		m.Insert(Section{ID: SectionExport, Payload: p})
	}
	return names, nil
}

// globalInfo is what readGlobals learns.
type globalInfo struct {
	mutable       []MutableGlobal
	exports       uint32              // number of exports
	exportEntries []byte              // the export section after its count
	exportNames   map[string]struct{} // every export name
}

func readGlobals(m *Module) (*globalInfo, error) {
	g := &globalInfo{exportNames: map[string]struct{}{}}
	var imported uint32
	if s := m.Section(SectionImport); s != nil {
		r := byteReader{b: s.Payload}
		n := r.count(4)
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.name()
			r.name()
			switch kind := r.byte(); kind {
			case externFunc:
				r.u32()
			case externTable:
				r.valType()
				r.limits()
			case externMemory:
				r.limits()
			case externGlobal:
				r.valType()
				r.mutability()
				imported++
			case externTag:
				r.byte()
				r.u32()
			default:
				r.fail("import %d: unknown kind 0x%02x", i, kind)
			}
		}
		if err := r.end("import"); err != nil {
			return nil, err
		}
	}
	if s := m.Section(SectionGlobal); s != nil {
		r := byteReader{b: s.Payload}
		n := r.count(3)
		if uint64(imported)+uint64(n) > 1<<32-1 {
			r.fail("too many globals")
		}
		for i := uint32(0); i < n && r.err == nil; i++ {
			var typ byte
			if r.pos < len(r.b) {
				typ = r.b[r.pos]
			}
			r.valType()
			if r.mutability() {
				g.mutable = append(g.mutable, MutableGlobal{Index: imported + i, Type: typ})
			}
			r.constExpr()
		}
		if err := r.end("global"); err != nil {
			return nil, err
		}
	}
	if s := m.Section(SectionExport); s != nil {
		byIndex := make(map[uint32]int, len(g.mutable))
		for j, mg := range g.mutable {
			byIndex[mg.Index] = j
		}
		r := byteReader{b: s.Payload}
		g.exports = r.count(3)
		start := r.pos
		for i := uint32(0); i < g.exports && r.err == nil; i++ {
			name := string(r.name())
			kind := r.byte()
			idx := r.u32()
			if r.err != nil {
				break
			}
			if _, dup := g.exportNames[name]; dup {
				r.fail("export %d: duplicate name %q", i, name)
				break
			}
			g.exportNames[name] = struct{}{}
			if j, ok := byIndex[idx]; ok && kind == externGlobal && g.mutable[j].Export == "" {
				g.mutable[j].Export = name
			}
		}
		if err := r.end("export"); err != nil {
			return nil, err
		}
		g.exportEntries = r.b[start:]
	}
	return g, nil
}

// byteReader reads the parts of a section payload. The first failure is
// kept in err and makes every later read a no-op returning zero.
type byteReader struct {
	b   []byte
	pos int
	err error
}

func (r *byteReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *byteReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.b) {
		r.fail("truncated at offset %d", r.pos)
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *byteReader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	v, n, err := U32(r.b[r.pos:])
	if err != nil {
		r.fail("offset %d: %v", r.pos, err)
		return 0
	}
	r.pos += n
	return v
}

func (r *byteReader) u64() {
	if r.err != nil {
		return
	}
	_, n, err := U64(r.b[r.pos:])
	if err != nil {
		r.fail("offset %d: %v", r.pos, err)
		return
	}
	r.pos += n
}

// count reads a vector length and checks that that many entries of at
// least minSize bytes fit in what remains.
func (r *byteReader) count(minSize int) uint32 {
	n := r.u32()
	if r.err == nil && uint64(n)*uint64(minSize) > uint64(len(r.b)-r.pos) {
		r.fail("count %d at offset %d runs past the end", n, r.pos)
		return 0
	}
	return n
}

func (r *byteReader) name() []byte {
	n := r.u32()
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(r.b)-r.pos) {
		r.fail("name at offset %d runs past the end", r.pos)
		return nil
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b
}

func (r *byteReader) valType() {
	if r.err != nil {
		return
	}
	n, err := ValTypeLen(r.b[r.pos:])
	if err != nil {
		r.fail("offset %d: %v", r.pos, err)
		return
	}
	r.pos += n
}

// mutability reads a global type's mutability byte: bit 0 is mutable, bit
// 1 shared (threads proposal).
func (r *byteReader) mutability() bool {
	c := r.byte()
	if c&^0x03 != 0 {
		r.fail("offset %d: unknown global mutability 0x%02x", r.pos-1, c)
		return false
	}
	return c&0x01 != 0
}

// limits skips the limits of a table or memory type: flags (bit 0: has a
// maximum, bit 1: shared, bit 2: 64-bit, bit 3: custom page size), the
// minimum, the maximum and the page size.
func (r *byteReader) limits() {
	flags := r.byte()
	if flags&^0x0F != 0 {
		r.fail("unknown limits flags 0x%02x", flags)
		return
	}
	r.u64()
	if flags&0x01 != 0 {
		r.u64()
	}
	if flags&0x08 != 0 {
		r.u32()
	}
}

// constExpr skips a constant expression, up to and including its end.
func (r *byteReader) constExpr() {
	for r.err == nil {
		ins, err := DecodeInstr(r.b[r.pos:])
		if err != nil {
			r.fail("constant expression at offset %d: %v", r.pos, err)
			return
		}
		r.pos += ins.Len
		if ins.Op == OpEnd {
			return
		}
	}
}

// end reports a failure, or bytes left after the last entry, as an error
// wrapping ErrMalformed.
func (r *byteReader) end(section string) error {
	if r.err == nil && r.pos != len(r.b) {
		r.fail("%d bytes after the last entry", len(r.b)-r.pos)
	}
	if r.err != nil {
		return fmt.Errorf("%w: %s section: %v", ErrMalformed, section, r.err)
	}
	return nil
}
