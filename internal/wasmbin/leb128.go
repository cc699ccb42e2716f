package wasmbin

import (
	"errors"
	"fmt"
)

// ErrLEB128 reports a malformed or overlong LEB128 integer.
var ErrLEB128 = errors.New("wasmbin: malformed LEB128 integer")

// U32 decodes an unsigned LEB128 integer of at most 32 bits from the start
// of b and returns it with the number of bytes read.
func U32(b []byte) (uint32, int, error) {
	v, n, err := uleb(b, 32)
	return uint32(v), n, err
}

// U64 decodes an unsigned LEB128 integer of at most 64 bits.
func U64(b []byte) (uint64, int, error) { return uleb(b, 64) }

// S32 decodes a signed LEB128 integer of at most 32 bits.
func S32(b []byte) (int32, int, error) {
	v, n, err := sleb(b, 32)
	return int32(v), n, err
}

// S64 decodes a signed LEB128 integer of at most 64 bits.
func S64(b []byte) (int64, int, error) { return sleb(b, 64) }

// S33 decodes a signed 33-bit LEB128 integer, the encoding of block types.
func S33(b []byte) (int64, int, error) { return sleb(b, 33) }

func uleb(b []byte, bits uint) (uint64, int, error) {
	var v uint64
	var shift uint
	maxBytes := int((bits + 6) / 7)
	for i := 0; i < len(b); i++ {
		if i >= maxBytes {
			return 0, 0, ErrLEB128
		}
		c := b[i]
		if i == maxBytes-1 {
			// The last byte may only carry the bits that remain.
			rem := bits - shift
			if c&0x80 != 0 || (rem < 7 && c>>rem != 0) {
				return 0, 0, ErrLEB128
			}
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, i + 1, nil
		}
		shift += 7
	}
	return 0, 0, fmt.Errorf("%w: truncated", ErrLEB128)
}

func sleb(b []byte, bits uint) (int64, int, error) {
	var v int64
	var shift uint
	maxBytes := int((bits + 6) / 7)
	for i := 0; i < len(b); i++ {
		if i >= maxBytes {
			return 0, 0, ErrLEB128
		}
		c := b[i]
		if i == maxBytes-1 {
			if c&0x80 != 0 {
				return 0, 0, ErrLEB128
			}
			// The unused high bits must all equal the sign bit.
			rem := bits - shift
			if rem < 7 {
				hi := int8(c<<1) >> rem // bits rem-1..6, sign-extended
				if hi != 0 && hi != -1 {
					return 0, 0, ErrLEB128
				}
			}
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: truncated", ErrLEB128)
}

// AppendU32 appends v in unsigned LEB128 form.
func AppendU32(b []byte, v uint32) []byte { return AppendU64(b, uint64(v)) }

// AppendU64 appends v in unsigned LEB128 form.
func AppendU64(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// AppendS64 appends v in signed LEB128 form.
func AppendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// AppendS32 appends v in signed LEB128 form.
func AppendS32(b []byte, v int32) []byte { return AppendS64(b, int64(v)) }
