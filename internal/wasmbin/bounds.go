package wasmbin

import (
	"errors"
	"fmt"
)

// ErrTooLarge reports a module that declares more than a bound allows.
// Such declarations cost the host memory out of proportion to the
// module's size: a few bytes can declare billions of locals or table
// elements.
var ErrTooLarge = errors.New("wasmbin: module declares too much")

// Table element types.
const (
	refFunc   = 0x70
	refExtern = 0x6F
)

// BoundTables rewrites the table section of m so that the tables it
// defines together never hold more than max elements: each table gets a
// maximum (or a lower one), and table.grow past it fails inside the guest
// (it returns -1, as the specification allows). A module whose tables
// start with more than max elements is an error wrapping ErrTooLarge.
// Tables other than funcref and externref with plain limits are an error
// wrapping ErrMalformed. On error m is unchanged.
func BoundTables(m *Module, max uint32) error {
	sec := m.Section(SectionTable)
	if sec == nil {
		return nil
	}
	type table struct {
		typ      byte
		min      uint32
		max      uint32
		hasLimit bool
	}
	r := &Reader{B: sec.Payload}
	tables := make([]table, r.Count(3))
	var total uint64
	for i := range tables {
		t := &tables[i]
		if t.typ = r.Byte(); r.Err == nil && t.typ != refFunc && t.typ != refExtern {
			r.Fail("table %d: unsupported table type 0x%02x", i, t.typ)
		}
		switch flags := r.Byte(); flags {
		case 0x00:
			t.min = r.U32()
		case 0x01:
			t.min, t.max, t.hasLimit = r.U32(), r.U32(), true
		default:
			r.Fail("table %d: unsupported limits flags 0x%02x", i, flags)
		}
		total += uint64(t.min)
	}
	r.End("table")
	if r.Err != nil {
		return r.Err
	}
	if total > uint64(max) {
		return fmt.Errorf("%w: tables of %d elements (at most %d)", ErrTooLarge, total, max)
	}
	// Each table may grow by an equal share of what is left.
	share := uint32(0)
	if len(tables) > 0 {
		share = uint32((uint64(max) - total) / uint64(len(tables)))
	}
	out := AppendU32(nil, uint32(len(tables)))
	for _, t := range tables {
		limit := t.min + share
		if t.hasLimit && t.max < limit {
			limit = t.max
		}
		out = append(out, t.typ, 0x01)
		out = AppendU32(AppendU32(out, t.min), limit)
	}
	sec.Payload = out
	return nil
}

// CheckLocals fails with an error wrapping ErrTooLarge when a function of m
// declares more than max locals (parameters not included), and with one
// wrapping ErrMalformed when the code section cannot be read.
func CheckLocals(m *Module, max uint32) error {
	sec := m.Section(SectionCode)
	if sec == nil {
		return nil
	}
	r := &Reader{B: sec.Payload}
	for i := range r.Count(1) {
		body := &Reader{B: r.Bytes(r.U32())}
		var locals uint64
		for range body.Count(2) {
			locals += uint64(body.U32())
			body.ValType()
		}
		if err := errors.Join(r.Err, body.Err); err != nil {
			return err
		}
		if locals > uint64(max) {
			return fmt.Errorf("%w: function %d declares %d locals (at most %d)", ErrTooLarge, i, locals, max)
		}
	}
	r.End("function body")
	return r.Err
}
