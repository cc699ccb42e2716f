package wasmbin

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func tableModule(payload []byte) *Module {
	return &Module{Sections: []Section{{ID: SectionTable, Payload: payload}}}
}

func TestBoundTables(t *testing.T) {
	for name, c := range map[string]struct{ in, want []byte }{
		"no max":             {[]byte{1, refFunc, 0, 10}, []byte{1, refFunc, 1, 10, 100}},
		"lower max kept":     {[]byte{1, refFunc, 1, 10, 20}, []byte{1, refFunc, 1, 10, 20}},
		"higher max lowered": {[]byte{1, refExtern, 1, 0, 0xFF, 0x01}, []byte{1, refExtern, 1, 0, 100}},
		"shared slack":       {[]byte{2, refFunc, 0, 10, refFunc, 0, 20}, []byte{2, refFunc, 1, 10, 45, refFunc, 1, 20, 55}},
		"empty":              {[]byte{0}, []byte{0}},
	} {
		t.Run(name, func(t *testing.T) {
			m := tableModule(c.in)
			require.NoError(t, BoundTables(m, 100))
			assert.Equal(t, c.want, m.Section(SectionTable).Payload)
		})
	}
	for name, in := range map[string][]byte{
		"too large": {2, refFunc, 0, 60, refFunc, 0, 41},
		"shared":    {1, refFunc, 3, 1, 2},
		"typed ref": {1, 0x63, 0x70, 0, 1},
		"init expr": {1, 0x40, 0x00, refFunc, 0, 1, 0xD0, 0x70, 0x0B},
		"truncated": {2, refFunc, 0, 1},
		"trailing":  {1, refFunc, 0, 1, 0},
	} {
		t.Run(name, func(t *testing.T) {
			m := tableModule(in)
			err := BoundTables(m, 100)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrTooLarge) || errors.Is(err, ErrMalformed), "%v", err)
			assert.Equal(t, in, m.Section(SectionTable).Payload, "unchanged on error")
		})
	}
}

func TestCheckLocals(t *testing.T) {
	code := func(bodies ...[]byte) *Module {
		p := AppendU32(nil, uint32(len(bodies)))
		for _, b := range bodies {
			p = append(AppendU32(p, uint32(len(b))), b...)
		}
		return &Module{Sections: []Section{{ID: SectionCode, Payload: p}}}
	}
	require.NoError(t, CheckLocals(code([]byte{0, 0x0B}, []byte{2, 50, 0x7F, 50, 0x7E, 0x0B}), 100))
	require.ErrorIs(t, CheckLocals(code([]byte{0, 0x0B}, []byte{2, 51, 0x7F, 50, 0x7E, 0x0B}), 100), ErrTooLarge)
	big := append(AppendU32([]byte{1}, 1<<31), 0x7E, 0x0B)
	require.ErrorIs(t, CheckLocals(code(big), 100), ErrTooLarge)
	require.ErrorIs(t, CheckLocals(code([]byte{1, 5}), 100), ErrMalformed, "no value type")
	require.ErrorIs(t, CheckLocals(&Module{Sections: []Section{{ID: SectionCode, Payload: []byte{2, 1, 0}}}}, 100), ErrMalformed)
	require.NoError(t, CheckLocals(&Module{}, 100))
}

// FuzzBounds checks that CheckLocals and BoundTables never panic, fail only
// with their documented errors, and that a bounded table section declares
// at most the bound and is itself left as it is by a second pass.
func FuzzBounds(f *testing.F) {
	f.Add([]byte{2, refFunc, 0, 10, refExtern, 1, 3, 4})
	f.Add([]byte{1, refFunc, 1, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 1})
	f.Add([]byte{1, 0x40, 0, refFunc, 0, 1})
	f.Add([]byte{2, 4, 1, 0x80, 0x80, 0x80, 0x80, 0x08, 0x7E, 0x0B, 0x05, 1, 1, 0x7F, 0x0B})
	f.Fuzz(func(t *testing.T, payload []byte) {
		m := &Module{Sections: []Section{{ID: SectionTable, Payload: payload}, {ID: SectionCode, Payload: payload}}}
		if err := CheckLocals(m, 1000); err != nil && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrMalformed) {
			t.Fatalf("CheckLocals: %v", err)
		}
		err := BoundTables(m, 1000)
		if err != nil {
			if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("BoundTables: %v", err)
			}
			return
		}
		out := append([]byte(nil), m.Section(SectionTable).Payload...)
		r := &Reader{B: out}
		var total uint64
		for range r.Count(4) {
			r.Byte()
			if flags := r.Byte(); flags != 1 {
				t.Fatalf("table without a maximum: % x", out)
			}
			r.U32()
			total += uint64(r.U32())
		}
		r.End("table")
		if r.Err != nil || total > 1000 {
			t.Fatalf("bounded section % x: %v, %d elements", out, r.Err, total)
		}
		if err := BoundTables(m, 1000); err != nil {
			t.Fatalf("second pass: %v", err)
		}
		if string(m.Section(SectionTable).Payload) != string(out) {
			t.Fatalf("second pass changed % x to % x", out, m.Section(SectionTable).Payload)
		}
	})
}
