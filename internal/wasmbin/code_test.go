package wasmbin

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func bs(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case int:
			b = append(b, byte(p))
		case []byte:
			b = append(b, p...)
		default:
			panic(fmt.Sprintf("bs: %T", p))
		}
	}
	return b
}

var sixteen = bytes.Repeat([]byte{0xAB}, 16)

func TestDecodeInstr(t *testing.T) {
	cases := []struct {
		name  string
		in    []byte
		op    Opcode
		index uint32
	}{
		{"unreachable", bs(0x00), OpUnreachable, 0},
		{"block empty", bs(0x02, 0x40), OpBlock, 0},
		{"loop i32", bs(0x03, 0x7F), OpLoop, 0},
		{"if type index 128", bs(0x04, 0x80, 0x01), OpIf, 0},
		{"block (ref null func)", bs(0x02, 0x63, 0x70), OpBlock, 0},
		{"block (ref 300)", bs(0x02, 0x64, 0xAC, 0x02), OpBlock, 0},
		{"br_table", bs(0x0E, 0x02, 0x00, 0x81, 0x01, 0x02), 0x0E, 0},
		{"call 128", bs(0x10, 0x80, 0x01), OpCall, 128},
		{"call_indirect", bs(0x11, 0x01, 0x00), 0x11, 1},
		{"return_call", bs(0x12, 0x03), OpReturnCall, 3},
		{"return_call_indirect", bs(0x13, 0x03, 0x01), 0x13, 3},
		{"call_ref", bs(0x14, 0x02), 0x14, 2},
		{"select t", bs(0x1C, 0x01, 0x7F), 0x1C, 0},
		{"select (ref null 5)", bs(0x1C, 0x01, 0x63, 0x05), 0x1C, 0},
		{"local.get", bs(0x20, 0x05), 0x20, 5},
		{"table.set", bs(0x26, 0x01), 0x26, 1},
		{"i32.load", bs(0x28, 0x02, 0x80, 0x08), 0x28, 0},
		{"i64.store32 in memory 1", bs(0x3E, 0x42, 0x01, 0x10), 0x3E, 0},
		{"i32.load offset u64", bs(0x28, 0x02, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), 0x28, 0},
		{"memory.grow", bs(0x40, 0x00), 0x40, 0},
		{"i32.const -1", bs(0x41, 0x7F), 0x41, 0},
		{"i64.const min", bs(0x42, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7F), 0x42, 0},
		{"f32.const", bs(0x43, 1, 2, 3, 4), 0x43, 0},
		{"f64.const", bs(0x44, 1, 2, 3, 4, 5, 6, 7, 8), 0x44, 0},
		{"i64.extend32_s", bs(0xC4), 0xC4, 0},
		{"ref.null func", bs(0xD0, 0x70), 0xD0, 0},
		{"ref.null 3", bs(0xD0, 0x03), 0xD0, 0},
		{"ref.func", bs(0xD2, 0xFF, 0x7F), OpRefFunc, 16383},
		{"br_on_null", bs(0xD5, 0x01), 0xD5, 1},
		{"i32.trunc_sat_f32_s", bs(0xFC, 0x00), 0xFC0000, 0},
		{"memory.init", bs(0xFC, 0x08, 0x03, 0x00), 0xFC0008, 3},
		{"data.drop", bs(0xFC, 0x09, 0x03), 0xFC0009, 3},
		{"memory.copy", bs(0xFC, 0x0A, 0x00, 0x00), 0xFC000A, 0},
		{"memory.fill", bs(0xFC, 0x0B, 0x00), 0xFC000B, 0},
		{"table.init", bs(0xFC, 0x0C, 0x02, 0x01), 0xFC000C, 2},
		{"table.copy", bs(0xFC, 0x0E, 0x00, 0x01), 0xFC000E, 0},
		{"table.fill", bs(0xFC, 0x11, 0x04), 0xFC0011, 4},
		{"v128.load", bs(0xFD, 0x00, 0x04, 0x00), 0xFD0000, 0},
		{"v128.store", bs(0xFD, 0x0B, 0x04, 0x10), 0xFD000B, 0},
		{"v128.const", bs(0xFD, 0x0C, sixteen), 0xFD000C, 0},
		{"i8x16.shuffle", bs(0xFD, 0x0D, sixteen), 0xFD000D, 0},
		{"i8x16.swizzle", bs(0xFD, 0x0E), 0xFD000E, 0},
		{"i8x16.extract_lane_s", bs(0xFD, 0x15, 0x0F), 0xFD0015, 0},
		{"f64x2.replace_lane", bs(0xFD, 0x22, 0x01), 0xFD0022, 0},
		{"v128.any_true", bs(0xFD, 0x53), 0xFD0053, 0},
		{"v128.load8_lane", bs(0xFD, 0x54, 0x00, 0x00, 0x01), 0xFD0054, 0},
		{"v128.store64_lane", bs(0xFD, 0x5B, 0x03, 0x08, 0x01), 0xFD005B, 0},
		{"v128.load32_zero", bs(0xFD, 0x5C, 0x02, 0x00), 0xFD005C, 0},
		{"f64x2.promote_low_f32x4", bs(0xFD, 0x5F), 0xFD005F, 0},
		{"i16x8.abs", bs(0xFD, 0x80, 0x01), 0xFD0080, 0},
		{"f64x2.convert_low_i32x4_u", bs(0xFD, 0xFF, 0x01), 0xFD00FF, 0},
		{"i8x16.relaxed_swizzle", bs(0xFD, 0x80, 0x02), 0xFD0100, 0},
		{"memory.atomic.notify", bs(0xFE, 0x00, 0x02, 0x00), 0xFE0000, 0},
		{"atomic.fence", bs(0xFE, 0x03, 0x00), 0xFE0003, 0},
		{"i32.atomic.load", bs(0xFE, 0x10, 0x02, 0x00), 0xFE0010, 0},
		{"i64.atomic.rmw32.cmpxchg_u", bs(0xFE, 0x4E, 0x02, 0x04), 0xFE004E, 0},
		{"try", bs(0x06, 0x40), OpTry, 0},
		{"catch", bs(0x07, 0x01), OpCatch, 1},
		{"throw", bs(0x08, 0x01), 0x08, 1},
		{"delegate", bs(0x18, 0x00), OpDelegate, 0},
		{"catch_all", bs(0x19), OpCatchAll, 0},
		{"try_table", bs(0x1F, 0x40, 0x03, 0x00, 0x00, 0x00, 0x01, 0x02, 0x01, 0x03, 0x02), OpTryTable, 0},
		{"throw_ref", bs(0x0A), 0x0A, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, err := DecodeInstr(c.in)
			require.NoError(t, err)
			assert.Equal(t, Instr{Op: c.op, Len: len(c.in), Index: c.index}, in)

			// What follows the instruction is not read.
			in, err = DecodeInstr(append(bytes.Clone(c.in), 0x80, 0x80, 0xFF, 0x00))
			require.NoError(t, err)
			assert.Equal(t, len(c.in), in.Len)

			// Every truncation is an error.
			for n := range len(c.in) {
				_, err := DecodeInstr(c.in[:n])
				assert.ErrorIs(t, err, ErrMalformed, "truncated to %d bytes", n)
			}
		})
	}
}

func TestDecodeInstrRejects(t *testing.T) {
	cases := map[string][]byte{
		"unassigned 0x27":             bs(0x27),
		"unassigned 0xC5":             bs(0xC5),
		"GC prefix":                   bs(0xFB, 0x00),
		"unassigned 0xFF":             bs(0xFF),
		"misc 18":                     bs(0xFC, 0x12),
		"misc overlong sub-opcode":    bs(0xFC, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00),
		"SIMD gap 0x9A":               bs(0xFD, 0x9A, 0x01),
		"SIMD gap 0xEE":               bs(0xFD, 0xEE, 0x01),
		"SIMD past relaxed":           bs(0xFD, 0x94, 0x02),
		"SIMD sub-opcode past 16 bit": bs(0xFD, 0x8C, 0x80, 0x04),
		"atomic 0x04":                 bs(0xFE, 0x04, 0x00, 0x00),
		"atomic 0x4F":                 bs(0xFE, 0x4F, 0x00, 0x00),
		"atomic.fence non-zero":       bs(0xFE, 0x03, 0x01),
		"br_table count too large":    bs(0x0E, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x00),
		"select t count too large":    bs(0x1C, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x7F),
		"try_table bad catch kind":    bs(0x1F, 0x40, 0x01, 0x04, 0x00),
		"i32.const too long":          bs(0x41, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00),
		"call index too long":         bs(0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeInstr(in)
			assert.ErrorIs(t, err, ErrMalformed)
		})
	}
}

// TestDecodeInstrOpcodeSpace decodes every opcode and sub-opcode followed
// by assorted bytes: it must never panic or read past its input, and it
// must know exactly the instructions the specifications assign.
func TestDecodeInstrOpcodeSpace(t *testing.T) {
	tails := [][]byte{nil, {0x00}, bytes.Repeat([]byte{0x00}, 20), bytes.Repeat([]byte{0x80}, 20), bytes.Repeat([]byte{0xFF}, 20)}
	valid := map[byte]int{}
	for op := range 256 {
		var subs [][]byte
		if op >= 0xFC && op <= 0xFE {
			for sub := range 0x140 {
				subs = append(subs, AppendU32(nil, uint32(sub)))
			}
		} else {
			subs = [][]byte{nil}
		}
		for _, sub := range subs {
			for ti, tail := range tails {
				b := bs(op, sub, tail)
				in, err := DecodeInstr(b)
				if err != nil {
					assert.ErrorIs(t, err, ErrMalformed)
					continue
				}
				require.Positive(t, in.Len)
				require.LessOrEqual(t, in.Len, len(b))
				if ti == 2 { // zero bytes make every immediate valid
					valid[byte(op)]++
				}
			}
		}
	}
	// One-byte opcodes: 0x00-0x15 but 0x16 and 0x17, 0x18-0x1C, 0x1F, 0x20-0x26,
	// 0x28-0xC4, 0xD0-0xD6.
	one := 0
	for op, n := range valid {
		if op < 0xFC {
			one += n
		}
	}
	assert.Equal(t, 0x16+5+1+7+(0xC4-0x28+1)+7, one)
	assert.Equal(t, 18, valid[0xFC], "saturating truncation, bulk memory and table instructions")
	assert.Equal(t, 236+20, valid[0xFD], "SIMD and relaxed SIMD instructions")
	assert.Equal(t, 4+0x4E-0x10+1, valid[0xFE], "atomic instructions")
}

func TestValTypeLen(t *testing.T) {
	for in, want := range map[string]int{"\x7F": 1, "\x70": 1, "\x63\x70": 2, "\x64\x80\x01": 3} {
		n, err := ValTypeLen([]byte(in))
		require.NoError(t, err)
		assert.Equal(t, want, n, "% x", in)
	}
	for _, in := range []string{"", "\x63", "\x64\x80"} {
		_, err := ValTypeLen([]byte(in))
		assert.ErrorIs(t, err, ErrMalformed, "% x", in)
	}
}

func TestInsert(t *testing.T) {
	m := &Module{Sections: []Section{
		{ID: SectionCustom, Name: "first"},
		{ID: SectionFunction, Payload: []byte{0}},
		{ID: SectionCustom, Name: "before code"},
		{ID: SectionDataCount, Payload: []byte{0}},
		{ID: SectionCode, Payload: []byte{0}},
	}}
	m.Insert(Section{ID: SectionType, Payload: []byte{0}})
	m.Insert(Section{ID: SectionExport, Payload: []byte{0}})
	m.Insert(Section{ID: SectionElement, Payload: []byte{0}})
	m.Insert(Section{ID: SectionData, Payload: []byte{0}})
	var order []string
	for _, s := range m.Sections {
		order = append(order, fmt.Sprint(s.ID, s.Name))
	}
	assert.Equal(t, []string{"0first", "1", "3", "0before code", "7", "9", "12", "10", "11"}, order)
	_, err := Parse(m.Encode())
	assert.NoError(t, err, "the sections are in a valid order")
}

func TestTryTable(t *testing.T) {
	// try_table (result i32) (catch 1 0) (catch_ref 2 1) (catch_all 2) (catch_all_ref 3)
	b := []byte{0x1F, 0x7F, 4, 0x00, 1, 0, 0x01, 2, 1, 0x02, 2, 0x03, 3}
	bt, catches, err := TryTable(b)
	require.NoError(t, err)
	assert.Equal(t, []byte{0x7F}, bt)
	assert.Equal(t, []Catch{{0, 1, 0}, {1, 2, 1}, {2, 0, 2}, {3, 0, 3}}, catches)
	for name, bad := range map[string][]byte{
		"not a try_table": {0x02, 0x40},
		"clause kind 4":   {0x1F, 0x40, 1, 0x04, 0},
		"truncated":       {0x1F, 0x40, 2, 0x02, 0},
	} {
		_, _, err := TryTable(bad)
		assert.ErrorIs(t, err, ErrMalformed, name)
	}
}

func TestCheckTags(t *testing.T) {
	types := Section{ID: SectionType, Payload: []byte{1, 0x60, 1, 0x7F, 0}}
	ok := &Module{Sections: []Section{types, {ID: SectionTag, Payload: []byte{1, 0, 0}}}}
	require.NoError(t, CheckTags(ok))
	bad := &Module{Sections: []Section{types, {ID: SectionTag, Payload: []byte{1, 0, 1}}}}
	assert.ErrorIs(t, CheckTags(bad), ErrMalformed)
	imported := &Module{Sections: []Section{types, {ID: SectionImport, Payload: []byte{1, 1, 'm', 1, 't', ImportTag, 0, 5}}}}
	assert.ErrorIs(t, CheckTags(imported), ErrMalformed)
}
