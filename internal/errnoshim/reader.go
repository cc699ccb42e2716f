package errnoshim

import (
	"fmt"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// reader walks a section payload. The first error sticks: later reads
// return zero values, so a parser checks err once per item or at the end.
type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", wasmbin.ErrMalformed, fmt.Sprintf(format, args...))
	}
}

func (r *reader) done() bool { return r.err != nil || r.pos >= len(r.b) }

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.b) {
		r.fail("unexpected end at offset %d", r.pos)
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *reader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	v, n, err := wasmbin.U32(r.b[r.pos:])
	if err != nil {
		r.fail("offset %d: %v", r.pos, err)
		return 0
	}
	r.pos += n
	return v
}

func (r *reader) u64() uint64 {
	if r.err != nil {
		return 0
	}
	v, n, err := wasmbin.U64(r.b[r.pos:])
	if err != nil {
		r.fail("offset %d: %v", r.pos, err)
		return 0
	}
	r.pos += n
	return v
}

func (r *reader) bytes(n uint32) []byte {
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(r.b)-r.pos) {
		r.fail("%d bytes at offset %d run past the end", n, r.pos)
		return nil
	}
	s := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return s
}

// count reads a vector length and checks that that many items of at least
// minSize bytes each can fit in what remains, so that a loop over a bogus
// count ends quickly.
func (r *reader) count(minSize int) uint32 {
	n := r.u32()
	if r.err == nil && uint64(n)*uint64(minSize) > uint64(len(r.b)-r.pos) {
		r.fail("vector of %d items at offset %d runs past the end", n, r.pos)
		return 0
	}
	return n
}

func (r *reader) name() []byte { return r.bytes(r.u32()) }

// valType reads a value type and returns its first byte.
func (r *reader) valType() byte {
	if r.err != nil {
		return 0
	}
	n, err := wasmbin.ValTypeLen(r.b[r.pos:])
	if err != nil {
		r.fail("offset %d: %v", r.pos, err)
		return 0
	}
	c := r.b[r.pos]
	r.pos += n
	return c
}

// limits skips the limits of a table or memory type: a flags byte (bit 0:
// has a maximum, bit 1: shared, bit 2: 64-bit, bit 3: custom page size),
// the minimum, the maximum and the page size.
func (r *reader) limits() {
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

// end fails unless the whole payload was read.
func (r *reader) end(what string) {
	if r.err == nil && r.pos != len(r.b) {
		r.fail("%d bytes after the last %s", len(r.b)-r.pos, what)
	}
}
