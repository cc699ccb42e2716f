package wasmbin

import "fmt"

// Opcode identifies an instruction. A one-byte instruction's opcode is that
// byte; a prefixed instruction's opcode is the prefix (0xFC, 0xFD or 0xFE)
// shifted left by 16 and ORed with its sub-opcode, so that
// i32.trunc_sat_f32_s is 0xFC0000 and v128.const is 0xFD000C.
type Opcode uint32

// Opcodes that passes over function bodies need by name: structured control,
// the instructions whose first immediate is a function index, and global
// access (the rewriters' own globals must stay out of the module's reach).
const (
	OpUnreachable Opcode = 0x00
	OpNop         Opcode = 0x01
	OpBlock       Opcode = 0x02
	OpLoop        Opcode = 0x03
	OpIf          Opcode = 0x04
	OpElse        Opcode = 0x05
	OpTry         Opcode = 0x06 // legacy exception handling
	OpCatch       Opcode = 0x07 // legacy exception handling
	OpEnd         Opcode = 0x0B
	OpCall        Opcode = 0x10
	OpReturnCall  Opcode = 0x12
	OpDelegate    Opcode = 0x18 // legacy exception handling
	OpCatchAll    Opcode = 0x19 // legacy exception handling
	OpDrop        Opcode = 0x1A
	OpTryTable    Opcode = 0x1F
	OpGlobalGet   Opcode = 0x23
	OpGlobalSet   Opcode = 0x24
	OpRefFunc     Opcode = 0xD2
)

// Instr is one decoded instruction.
type Instr struct {
	// Op is the instruction's opcode.
	Op Opcode
	// Len is the number of bytes the instruction takes, opcode and
	// immediates included.
	Len int
	// Index is the value of the first immediate when that immediate is an
	// index (of a function, label, local, global, table, type, tag, data or
	// element segment, or memory for memory.size and memory.grow), else 0.
	// For call, return_call and ref.func it is the function index, encoded
	// in the bytes after a one-byte opcode.
	Index uint32
}

// Immediate layouts.
const (
	immBad      uint8 = iota // not an instruction
	immNone                  // no immediate
	immBlock                 // block type
	immIdx                   // one u32 index
	immIdx2                  // two u32 indices
	immBrTable               // vec(label) label
	immSelectT               // vec(valtype)
	immMem                   // memarg
	immMemLane               // memarg, lane index byte
	immLane                  // lane index byte
	immBytes16               // 16 raw bytes (v128.const, i8x16.shuffle)
	immI32                   // s32
	immI64                   // s64
	immF32                   // 4 raw bytes
	immF64                   // 8 raw bytes
	immHeapType              // heap type (ref.null)
	immTryTable              // block type, vec(catch clause)
	immZeroByte              // one byte that must be zero (atomic.fence)
	immPrefix                // 0xFC, 0xFD or 0xFE: u32 sub-opcode follows
)

// oneByte gives the immediate layout of each one-byte opcode.
var oneByte = func() (t [256]uint8) {
	set := func(lo, hi int, imm uint8) {
		for op := lo; op <= hi; op++ {
			t[op] = imm
		}
	}
	set(0x00, 0x01, immNone)     // unreachable, nop
	set(0x02, 0x04, immBlock)    // block, loop, if
	set(0x05, 0x05, immNone)     // else
	set(0x06, 0x06, immBlock)    // try (legacy exceptions)
	set(0x07, 0x08, immIdx)      // catch, throw: tag
	set(0x09, 0x09, immIdx)      // rethrow: label
	set(0x0A, 0x0A, immNone)     // throw_ref
	set(0x0B, 0x0B, immNone)     // end
	set(0x0C, 0x0D, immIdx)      // br, br_if
	set(0x0E, 0x0E, immBrTable)  // br_table
	set(0x0F, 0x0F, immNone)     // return
	set(0x10, 0x10, immIdx)      // call
	set(0x11, 0x11, immIdx2)     // call_indirect: type, table
	set(0x12, 0x12, immIdx)      // return_call
	set(0x13, 0x13, immIdx2)     // return_call_indirect
	set(0x14, 0x15, immIdx)      // call_ref, return_call_ref: type
	set(0x18, 0x18, immIdx)      // delegate: label
	set(0x19, 0x19, immNone)     // catch_all
	set(0x1A, 0x1B, immNone)     // drop, select
	set(0x1C, 0x1C, immSelectT)  // select t*
	set(0x1F, 0x1F, immTryTable) // try_table
	set(0x20, 0x26, immIdx)      // local.*, global.*, table.get, table.set
	set(0x28, 0x3E, immMem)      // loads and stores
	set(0x3F, 0x40, immIdx)      // memory.size, memory.grow: memory
	set(0x41, 0x41, immI32)      // i32.const
	set(0x42, 0x42, immI64)      // i64.const
	set(0x43, 0x43, immF32)      // f32.const
	set(0x44, 0x44, immF64)      // f64.const
	set(0x45, 0xC4, immNone)     // numeric, sign extension
	set(0xD0, 0xD0, immHeapType) // ref.null
	set(0xD1, 0xD1, immNone)     // ref.is_null
	set(0xD2, 0xD2, immIdx)      // ref.func
	set(0xD3, 0xD4, immNone)     // ref.eq, ref.as_non_null
	set(0xD5, 0xD6, immIdx)      // br_on_null, br_on_non_null
	set(0xFC, 0xFE, immPrefix)   // misc, vector, atomic
	return t
}()

// misc gives the layout of the 0xFC instructions: saturating truncation,
// bulk memory and table operations.
var misc = [...]uint8{
	0: immNone, 1: immNone, 2: immNone, 3: immNone, // i32.trunc_sat_*
	4: immNone, 5: immNone, 6: immNone, 7: immNone, // i64.trunc_sat_*
	8:  immIdx2, // memory.init data memory
	9:  immIdx,  // data.drop
	10: immIdx2, // memory.copy memory memory
	11: immIdx,  // memory.fill memory
	12: immIdx2, // table.init elem table
	13: immIdx,  // elem.drop
	14: immIdx2, // table.copy table table
	15: immIdx,  // table.grow
	16: immIdx,  // table.size
	17: immIdx,  // table.fill
}

// vector gives the layout of the 0xFD (SIMD) instructions, including relaxed
// SIMD (0x100-0x113). Opcodes the proposals leave unassigned are immBad.
var vector = func() (t [0x114]uint8) {
	for i := range t {
		t[i] = immNone
	}
	for op := 0x00; op <= 0x0B; op++ { // v128.load*, v128.store
		t[op] = immMem
	}
	t[0x0C] = immBytes16               // v128.const
	t[0x0D] = immBytes16               // i8x16.shuffle
	for op := 0x15; op <= 0x22; op++ { // extract_lane, replace_lane
		t[op] = immLane
	}
	for op := 0x54; op <= 0x5B; op++ { // v128.load*_lane, v128.store*_lane
		t[op] = immMemLane
	}
	t[0x5C] = immMem // v128.load32_zero
	t[0x5D] = immMem // v128.load64_zero
	for _, op := range []int{0x9A, 0xA2, 0xA5, 0xA6, 0xAF, 0xB0, 0xB2, 0xB3, 0xB4, 0xBB,
		0xC2, 0xC5, 0xC6, 0xCF, 0xD0, 0xD2, 0xD3, 0xD4, 0xE2, 0xEE} {
		t[op] = immBad
	}
	return t
}()

// atomic gives the layout of the 0xFE (threads) instructions.
var atomic = func() (t [0x4F]uint8) {
	t[0x00], t[0x01], t[0x02] = immMem, immMem, immMem // notify, wait32, wait64
	t[0x03] = immZeroByte                              // atomic.fence
	for op := 0x10; op <= 0x4E; op++ {                 // loads, stores, read-modify-write
		t[op] = immMem
	}
	return t
}()

// DecodeInstr decodes the instruction at the start of b: the WebAssembly 2.0
// instruction set (with sign extension, saturating truncation, bulk memory,
// reference types, multi-value and SIMD) and the threads, tail call,
// relaxed SIMD, exception handling, typed function references and
// multi-memory proposals. It reads immediates exactly, so Len is where the
// next instruction starts. An unknown opcode or a truncated immediate is an
// error wrapping ErrMalformed; DecodeInstr never reads past b.
//
// It does not validate: immediates are not checked against the module.
func DecodeInstr(b []byte) (Instr, error) {
	if len(b) == 0 {
		return Instr{}, fmt.Errorf("%w: truncated instruction", ErrMalformed)
	}
	op := b[0]
	in := Instr{Op: Opcode(op)}
	imm := oneByte[op]
	pos := 1
	if imm == immPrefix {
		sub, n, err := U32(b[1:])
		if err != nil {
			return Instr{}, fmt.Errorf("%w: opcode 0x%02x: sub-opcode: %v", ErrMalformed, op, err)
		}
		pos += n
		in.Op = Opcode(op)<<16 | Opcode(sub&0xFFFF)
		imm = immBad
		switch op {
		case 0xFC:
			if sub < uint32(len(misc)) {
				imm = misc[sub]
			}
		case 0xFD:
			if sub < uint32(len(vector)) {
				imm = vector[sub]
			}
		case 0xFE:
			if sub < uint32(len(atomic)) {
				imm = atomic[sub]
			}
		}
		if imm == immBad {
			return Instr{}, fmt.Errorf("%w: unknown opcode 0x%02x %d", ErrMalformed, op, sub)
		}
	}
	n, err := in.immediates(b, pos, imm)
	if err != nil {
		return Instr{}, fmt.Errorf("%w: opcode 0x%02x: %v", ErrMalformed, uint32(in.Op), err)
	}
	in.Len = n
	return in, nil
}

// immediates reads the immediates of layout imm that start at b[pos:] and
// returns the end of the instruction.
func (in *Instr) immediates(b []byte, pos int, imm uint8) (int, error) {
	switch imm {
	case immNone:
		return pos, nil
	case immBlock:
		return blockType(b, pos)
	case immIdx:
		v, n, err := U32(b[pos:])
		in.Index = v
		return pos + n, err
	case immIdx2:
		v, n, err := U32(b[pos:])
		if err != nil {
			return 0, err
		}
		in.Index = v
		_, m, err := U32(b[pos+n:])
		return pos + n + m, err
	case immBrTable:
		count, n, err := U32(b[pos:])
		if err != nil {
			return 0, err
		}
		pos += n
		// count+1 labels of at least one byte each must fit.
		if uint64(count) >= uint64(len(b)-pos) {
			return 0, errTruncated
		}
		for i := uint32(0); i <= count; i++ {
			_, n, err := U32(b[pos:])
			if err != nil {
				return 0, err
			}
			pos += n
		}
		return pos, nil
	case immSelectT:
		count, n, err := U32(b[pos:])
		if err != nil {
			return 0, err
		}
		pos += n
		if uint64(count) > uint64(len(b)-pos) {
			return 0, errTruncated
		}
		for i := uint32(0); i < count; i++ {
			n, err := ValTypeLen(b[pos:])
			if err != nil {
				return 0, err
			}
			pos += n
		}
		return pos, nil
	case immMem, immMemLane:
		pos, err := memarg(b, pos)
		if err != nil || imm == immMem {
			return pos, err
		}
		return fixed(b, pos, 1)
	case immLane, immZeroByte:
		if imm == immZeroByte && pos < len(b) && b[pos] != 0 {
			return 0, fmt.Errorf("reserved byte is 0x%02x, not zero", b[pos])
		}
		return fixed(b, pos, 1)
	case immBytes16:
		return fixed(b, pos, 16)
	case immI32:
		_, n, err := S32(b[pos:])
		return pos + n, err
	case immI64:
		_, n, err := S64(b[pos:])
		return pos + n, err
	case immF32:
		return fixed(b, pos, 4)
	case immF64:
		return fixed(b, pos, 8)
	case immHeapType:
		_, n, err := S33(b[pos:])
		return pos + n, err
	case immTryTable:
		pos, err := blockType(b, pos)
		if err != nil {
			return 0, err
		}
		count, n, err := U32(b[pos:])
		if err != nil {
			return 0, err
		}
		pos += n
		if uint64(count) > uint64(len(b)-pos) {
			return 0, errTruncated
		}
		for i := uint32(0); i < count; i++ {
			if pos >= len(b) {
				return 0, errTruncated
			}
			kind := b[pos]
			pos++
			switch kind {
			case 0x00, 0x01: // catch, catch_ref: tag label
				_, n, err := U32(b[pos:])
				if err != nil {
					return 0, err
				}
				pos += n
			case 0x02, 0x03: // catch_all, catch_all_ref: label
			default:
				return 0, fmt.Errorf("unknown catch clause 0x%02x", kind)
			}
			_, n, err := U32(b[pos:])
			if err != nil {
				return 0, err
			}
			pos += n
		}
		return pos, nil
	}
	return 0, fmt.Errorf("unknown opcode")
}

var errTruncated = fmt.Errorf("truncated immediate")

func fixed(b []byte, pos, n int) (int, error) {
	if n > len(b)-pos {
		return 0, errTruncated
	}
	return pos + n, nil
}

// blockType reads the block type of block, loop, if, try and try_table: the
// empty type 0x40, a value type, or an s33 type index.
func blockType(b []byte, pos int) (int, error) {
	if pos < len(b) && (b[pos] == 0x63 || b[pos] == 0x64) {
		n, err := ValTypeLen(b[pos:])
		return pos + n, err
	}
	_, n, err := S33(b[pos:])
	return pos + n, err
}

// memarg reads a memory argument: alignment flags, a memory index when bit 6
// of the flags is set (multi-memory), and an offset (u64 for memory64).
func memarg(b []byte, pos int) (int, error) {
	flags, n, err := U32(b[pos:])
	if err != nil {
		return 0, err
	}
	pos += n
	if flags&0x40 != 0 {
		_, n, err := U32(b[pos:])
		if err != nil {
			return 0, err
		}
		pos += n
	}
	_, n, err = U64(b[pos:])
	return pos + n, err
}

// ValTypeLen returns the length of the value type at the start of b: one
// byte, or for a typed reference (ref ht) and (ref null ht), that byte
// followed by an s33 heap type. It does not check that a one-byte type is
// known.
func ValTypeLen(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("%w: truncated value type", ErrMalformed)
	}
	if b[0] != 0x63 && b[0] != 0x64 {
		return 1, nil
	}
	_, n, err := S33(b[1:])
	if err != nil {
		return 0, fmt.Errorf("%w: heap type: %v", ErrMalformed, err)
	}
	return 1 + n, nil
}

// Catch is one catch clause of a try_table.
type Catch struct {
	// Kind is 0 (catch), 1 (catch_ref), 2 (catch_all) or 3 (catch_all_ref).
	Kind byte
	// Tag is the tag index of catch and catch_ref.
	Tag uint32
	// Label is where the clause branches, relative to the block around
	// the try_table.
	Label uint32
}

// TryTable decodes the try_table instruction at the start of b: its block
// type's encoding and its catch clauses.
func TryTable(b []byte) (bt []byte, catches []Catch, err error) {
	if len(b) == 0 || Opcode(b[0]) != OpTryTable {
		return nil, nil, fmt.Errorf("%w: not a try_table", ErrMalformed)
	}
	pos, err := blockType(b, 1)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: try_table: %v", ErrMalformed, err)
	}
	r := Reader{B: b, Pos: pos}
	n := r.Count(2)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		c := Catch{Kind: r.Byte()}
		switch c.Kind {
		case 0, 1:
			c.Tag = r.U32()
		case 2, 3:
		default:
			r.Fail("try_table: unknown catch clause 0x%02x", c.Kind)
		}
		c.Label = r.U32()
		catches = append(catches, c)
	}
	return b[1:pos], catches, r.Err
}
