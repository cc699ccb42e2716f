package fuel

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// allFeatures are the features of the modules these tests build.
const allFeatures = api.CoreFeaturesV2 | experimental.CoreFeaturesThreads | experimental.CoreFeaturesTailCall |
	experimental.CoreFeaturesExceptionHandling

func v128(lanes ...uint32) []byte {
	b := []byte{0xFD, 0x0C}
	for _, l := range lanes {
		b = binary.LittleEndian.AppendUint32(b, l)
	}
	return b
}

func f32Const(v float32) []byte {
	return binary.LittleEndian.AppendUint32([]byte{0x43}, math.Float32bits(v))
}

// proposalsModule exports functions that use instructions of the proposals
// merged into WebAssembly 2.0 and of threads and tail calls: each returns an
// i32 that depends on them working.
func proposalsModule() []byte {
	const (
		tConst  = 0 // () -> i32
		tUnary  = 1 // i32 -> i32
		tBinary = 2 // (i32 i32) -> i32
	)
	memarg := func(align, offset uint32) []byte { return cat(u32(align), u32(offset)) }
	identity := []byte{0xFD, 0x0D, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	bodies := []struct {
		name   string
		typ    uint32
		locals []byte
		code   [][]byte
	}{
		{"simd", tConst, nil, [][]byte{
			i32Const(16), v128(1, 2, 3, 4), {0xFD, 0x0B}, memarg(4, 0), // v128.store
			i32Const(16), {0xFD, 0x00}, memarg(4, 0), // v128.load
			v128(5, 6, 7, 8), identity, // i8x16.shuffle: the loaded vector
			v128(10, 20, 30, 40), {0xFD, 0xAE, 0x01}, // i32x4.add
			{0xFD, 0x1B, 0x02}, // i32x4.extract_lane 2
		}},
		{"bulk", tConst, nil, [][]byte{
			i32Const(100), i32Const(0), i32Const(5), {0xFC, 0x08, 0x00, 0x00}, // memory.init 0
			i32Const(200), i32Const(100), i32Const(5), {0xFC, 0x0A, 0x00, 0x00}, // memory.copy
			i32Const(300), i32Const(7), i32Const(3), {0xFC, 0x0B, 0x00}, // memory.fill
			{0xFC, 0x09, 0x00},                  // data.drop 0
			i32Const(202), {0x2D}, memarg(0, 0), // i32.load8_u: 'l'
			i32Const(301), {0x2D}, memarg(0, 0), // i32.load8_u: 7
			{i32Add},
		}},
		{"conversions", tConst, nil, [][]byte{
			f32Const(1e10), {0xFC, 0x00}, // i32.trunc_sat_f32_s
			i32Const(0x80), {0xC0}, // i32.extend8_s
			{i32Add},
		}},
		{"multivalue", tConst, vec(cat(u32(1), []byte{i32})), [][]byte{
			i32Const(3), i32Const(4), {opBlock}, u32(tBinary), {i32Add, end},
			i32Const(5), {opLoop}, u32(tUnary), i32Const(1), {i32Sub}, op(0x22, 0), localGet(0), brIf(0), {end},
			{i32Add},
		}},
		{"references", tConst, nil, [][]byte{
			{0xD0, funcref, 0xD1},                                    // ref.null func, ref.is_null
			i32Const(1), i32Const(2), i32Const(0), {0x1C, 0x01, i32}, // select (result i32)
			{i32Add},
			{0xD0, funcref}, i32Const(3), {0xFC, 0x0F, 0x00}, // table.grow
			{i32Add},
			{0xFC, 0x10, 0x00}, // table.size
			{i32Add},
		}},
		{"atomics", tConst, nil, [][]byte{
			i32Const(0), i32Const(5), {0xFE, 0x1E}, memarg(2, 0), {opDrop}, // i32.atomic.rmw.add
			{0xFE, 0x03, 0x00},                      // atomic.fence
			i32Const(0), {0xFE, 0x10}, memarg(2, 0), // i32.atomic.load
		}},
		{"tailcall", tConst, nil, [][]byte{i32Const(10), op(0x12, 7)}}, // return_call countdown
		{"countdown", tUnary, nil, [][]byte{
			localGet(0), {i32Eqz, opIf, i32}, i32Const(99),
			{opElse}, localGet(0), i32Const(1), {i32Sub}, op(0x12, 7), {end},
		}},
		{"brtable", tConst, nil, [][]byte{
			{opBlock, empty, opBlock, empty, opBlock, empty},
			i32Const(1), {0x0E, 0x02, 0x00, 0x01, 0x02},
			{end}, i32Const(10), {opReturn},
			{end}, i32Const(20), {opReturn},
			{end}, i32Const(30),
		}},
		{"i64", tConst, nil, [][]byte{i64Const(7), i64Const(-3), {0x7E, 0xA7}}}, // i64.mul, i32.wrap_i64
	}
	var funcs, exports, code [][]byte
	for i, b := range bodies {
		funcs = append(funcs, u32(b.typ))
		exports = append(exports, exportFunc(b.name, uint32(i)))
		code = append(code, fn(b.locals, b.code...))
	}
	return module(
		section(wasmbin.SectionType, vec(
			functype(nil, []byte{i32}),
			functype([]byte{i32}, []byte{i32}),
			functype([]byte{i32, i32}, []byte{i32}),
		)),
		section(wasmbin.SectionFunction, vec(funcs...)),
		section(wasmbin.SectionTable, vec([]byte{funcref, 0x00, 2})),
		section(wasmbin.SectionMemory, vec([]byte{0x00, 1})),
		section(wasmbin.SectionExport, vec(exports...)),
		section(wasmbin.SectionDataCount, u32(1)),
		section(wasmbin.SectionCode, vec(code...)),
		section(wasmbin.SectionData, vec(cat(u32(1), str("hello")))), // passive
	)
}

func TestProposalInstructions(t *testing.T) {
	ctx := context.Background()
	want := map[string]int32{
		"simd":        33,
		"bulk":        'l' + 7,
		"conversions": math.MaxInt32 - 128,
		"multivalue":  7,
		"references":  1 + 2 + 2 + 5,
		"atomics":     5,
		"tailcall":    99,
		"countdown":   99,
		"brtable":     20,
		"i64":         -21,
	}
	plain := proposalsModule()
	cfg := wazero.NewRuntimeConfig().WithCoreFeatures(allFeatures)
	for name, wasm := range map[string][]byte{"plain": plain, "instrumented": mustInstrument(t, plain)} {
		t.Run(name, func(t *testing.T) {
			r := wazero.NewRuntimeWithConfig(ctx, cfg)
			defer r.Close(ctx)
			m := &meter{refill: 1000}
			instantiateMeter(t, ctx, r, m)
			mod, err := r.Instantiate(ctx, wasm)
			require.NoError(t, err)
			for fn, w := range want {
				args := []uint64{}
				if fn == "countdown" {
					args = append(args, 3)
				}
				res, err := mod.ExportedFunction(fn).Call(ctx, args...)
				require.NoError(t, err, fn)
				assert.Equal(t, w, int32(res[0]), fn)
			}
			if name == "instrumented" {
				assert.Positive(t, m.used(t, mod))
			}
		})
	}
}
