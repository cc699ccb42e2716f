package sandbox

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// A hibernated session keeps its checkpoint packed: the pages that differ
// from the base image, compressed together (zstd, fastest level), and
// their indexes, instead of a page table as long as its memory (7,168
// entries for the built guest's 28 MiB) pointing at 4 KiB pages. A
// session's pages are mostly CPython's heap, which compresses several
// times over. The first call that needs the pages (a wake, a fork, a
// snapshot) unpacks them.

var (
	packEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	})
	packDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	})
)

// packed is a checkpoint's pages, compressed.
type packed struct {
	n     int    // len(checkpoint.pages)
	index []byte // the pages' indexes, little-endian uint32 each
	data  []byte // the pages in index order, compressed
}

// pack compresses the checkpoint's pages and drops its page table. Pages
// shared with a fork are only read.
func (c *checkpoint) pack() error {
	if c.packed != nil {
		return nil
	}
	enc, err := packEncoder()
	if err != nil {
		return err
	}
	p := &packed{n: len(c.pages)}
	var raw []byte
	for i, pg := range c.pages {
		if pg != nil {
			p.index = binary.LittleEndian.AppendUint32(p.index, uint32(i))
			raw = append(raw, pg...)
		}
	}
	// EncodeAll's buffer has room for the uncompressed size: keep only
	// what it holds.
	p.data = bytes.Clone(enc.EncodeAll(raw, nil))
	c.packed, c.pages, c.owned = p, nil, nil
	return nil
}

// unpack restores the page table of a packed checkpoint; the pages are
// slices of one buffer, which an update replaces page by page (not owned).
func (c *checkpoint) unpack() error {
	p := c.packed
	if p == nil {
		return nil
	}
	dec, err := packDecoder()
	if err != nil {
		return err
	}
	count := len(p.index) / 4
	raw, err := dec.DecodeAll(p.data, make([]byte, 0, count*pageSize))
	if err != nil || len(raw) != count*pageSize {
		return fmt.Errorf("sandbox: unpacking a hibernated session: %d bytes for %d pages (%v)", len(raw), count, err)
	}
	pages := make([][]byte, p.n)
	for k := range count {
		i := binary.LittleEndian.Uint32(p.index[4*k:])
		pages[i] = raw[k*pageSize : (k+1)*pageSize : (k+1)*pageSize]
	}
	c.pages, c.owned, c.packed = pages, nil, nil
	return nil
}
