package wasmbin

import "fmt"

// Reader walks a section payload. The first error sticks: later reads
// return zero values, so a parser checks err once per item or at the end.
type Reader struct {
	// B is the payload, Pos the offset of the next read, Err the first error.
	B   []byte
	Pos int
	Err error
}

// Fail records a malformed-input error, unless one is recorded already.
func (r *Reader) Fail(format string, args ...any) {
	if r.Err == nil {
		r.Err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
}

// Done reports whether the payload is used up or reading failed.
func (r *Reader) Done() bool { return r.Err != nil || r.Pos >= len(r.B) }

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.Err != nil {
		return 0
	}
	if r.Pos >= len(r.B) {
		r.Fail("unexpected end at offset %d", r.Pos)
		return 0
	}
	c := r.B[r.Pos]
	r.Pos++
	return c
}

// U32 reads an unsigned LEB128 u32.
func (r *Reader) U32() uint32 {
	if r.Err != nil {
		return 0
	}
	v, n, err := U32(r.B[r.Pos:])
	if err != nil {
		r.Fail("offset %d: %v", r.Pos, err)
		return 0
	}
	r.Pos += n
	return v
}

// U64 reads an unsigned LEB128 u64.
func (r *Reader) U64() uint64 {
	if r.Err != nil {
		return 0
	}
	v, n, err := U64(r.B[r.Pos:])
	if err != nil {
		r.Fail("offset %d: %v", r.Pos, err)
		return 0
	}
	r.Pos += n
	return v
}

// Bytes reads n raw bytes, aliasing the payload.
func (r *Reader) Bytes(n uint32) []byte {
	if r.Err != nil {
		return nil
	}
	if uint64(n) > uint64(len(r.B)-r.Pos) {
		r.Fail("%d bytes at offset %d run past the end", n, r.Pos)
		return nil
	}
	s := r.B[r.Pos : r.Pos+int(n)]
	r.Pos += int(n)
	return s
}

// count reads a vector length and checks that that many items of at least
// minSize bytes each can fit in what remains, so that a loop over a bogus
// count ends quickly.
func (r *Reader) Count(minSize int) uint32 {
	n := r.U32()
	if r.Err == nil && uint64(n)*uint64(minSize) > uint64(len(r.B)-r.Pos) {
		r.Fail("vector of %d items at offset %d runs past the end", n, r.Pos)
		return 0
	}
	return n
}

// Name reads a length-prefixed name.
func (r *Reader) Name() []byte { return r.Bytes(r.U32()) }

// valType reads a value type and returns its first byte.
func (r *Reader) ValType() byte {
	if r.Err != nil {
		return 0
	}
	n, err := ValTypeLen(r.B[r.Pos:])
	if err != nil {
		r.Fail("offset %d: %v", r.Pos, err)
		return 0
	}
	c := r.B[r.Pos]
	r.Pos += n
	return c
}

// limits skips the limits of a table or memory type: a flags byte (bit 0:
// has a maximum, bit 1: shared, bit 2: 64-bit, bit 3: custom page size),
// the minimum, the maximum and the page size.
func (r *Reader) Limits() {
	flags := r.Byte()
	if flags&^0x0F != 0 {
		r.Fail("unknown limits flags 0x%02x", flags)
		return
	}
	r.U64()
	if flags&0x01 != 0 {
		r.U64()
	}
	if flags&0x08 != 0 {
		r.U32()
	}
}

// end fails unless the whole payload was read.
func (r *Reader) End(what string) {
	if r.Err == nil && r.Pos != len(r.B) {
		r.Fail("%d bytes after the last %s", len(r.B)-r.Pos, what)
	}
}

// rest returns what remains unread.
func (r *Reader) Rest() []byte {
	if r.Err != nil {
		return nil
	}
	return r.B[r.Pos:]
}
