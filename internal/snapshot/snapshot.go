// Package snapshot encodes and decodes the bytes of a paused session.
//
// A snapshot is untrusted input: it may be truncated, corrupted or crafted.
// Decode and Stream check the magic, the format version and the header's
// length before they parse anything, report a snapshot whose SHA-256
// checksum over the whole encoding does not match as corrupt whatever
// else is wrong with it, and bound every length and count, by the Limits
// they are given (memory, files, total size) or by fixed bounds (the
// header: MaxHeader, MaxArgs, …), before they allocate: no input makes
// them allocate more than those allow, or panic. Stream decodes as the
// bytes arrive, so a restore never holds the encoded body. The checksum
// guards against damage only: anyone can compute it.
//
// The encoding:
//
//	"FUMEHOOD" "SNAP"         12 bytes of magic
//	version                   uint32, little-endian (Version)
//	header length             uint32
//	header                    JSON (Header)
//	body length               uint64
//	body                      one zstd frame: pages, then files (see encodeBody)
//	checksum                  SHA-256 of every byte before it
package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Version is the format version this package writes. Version 2 added the
// open descriptors (Header.Descriptors); version 3 allows a snapshot
// without a pause buffer (Header.AsyncifyBuffer 0: a session of a guest
// with the driver's entry points, whose state between runs is its memory
// alone). Decode reads versions 1 to 3 (a version 1 snapshot holds no
// descriptors: sessions refused to snapshot with files open). Encode
// always writes version 3, which builds that read only older versions
// refuse with ErrVersion.
const Version = 3

// MinVersion is the oldest format version Decode reads.
const MinVersion = 1

// PageSize is the granularity of the memory image: the pages of linear
// memory that differ from the base image are stored whole.
const PageSize = 4096

var magic = []byte("FUMEHOODSNAP")

const (
	prefixLen   = 12 + 4 + 4
	checksumLen = sha256.Size
	// maxWindow is the zstd window Encode uses and Decode accepts: the
	// decoder's buffer is never larger, whatever a frame declares.
	maxWindow = 4 << 20
)

// Fixed bounds on the header, whatever the Limits: a snapshot's header
// costs Decode at most a small multiple of MaxHeader bytes.
const (
	// MaxHeader bounds the JSON header in bytes.
	MaxHeader = 1 << 20
	// MaxArgs, MaxEnv, MaxMounts and MaxGlobals bound the lengths of the
	// header's lists: arguments, environment variables, mounts, globals.
	MaxArgs    = 1024
	MaxEnv     = 4096
	MaxMounts  = 256
	MaxGlobals = 1024
	// MaxDescriptors bounds the open descriptors of a snapshot, MaxFD their
	// numbers (so a resume never grows the runtime's descriptor table past
	// it), and MaxPath the length of each path (a descriptor's or a file's).
	MaxDescriptors = 4096
	MaxFD          = 1 << 16
	MaxPath        = 4096
	// MaxHeaderValues bounds the commas outside strings in the header (so
	// the values it holds), counted before it is parsed: what the lists
	// above need, a mount's or a global's fields included, and the
	// header's own fields.
	MaxHeaderValues = MaxArgs + MaxEnv + 3*MaxMounts + 2*MaxGlobals + 10*MaxDescriptors + 64
)

// Errors of Decode. Each wraps a description of what exactly was wrong.
var (
	// ErrFormat reports bytes that are not a fumehood snapshot at all.
	ErrFormat = errors.New("not a fumehood snapshot")
	// ErrVersion reports a snapshot of another format version.
	ErrVersion = errors.New("unsupported snapshot format version")
	// ErrCorrupt reports a truncated or damaged snapshot, or one whose
	// content breaks the format's rules.
	ErrCorrupt = errors.New("corrupt snapshot")
	// ErrLimit reports a snapshot that needs more than the caller's Limits
	// allow: more memory, file bytes or files, or more bytes in all.
	ErrLimit = errors.New("snapshot exceeds a limit")
)

// Global is the value of one exported mutable global of the guest.
type Global struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// Mount describes one preopened directory of the session, in order.
type Mount struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// InMemory marks the session's own in-memory filesystems, whose
	// content is in the snapshot. Other mounts are the caller's volumes,
	// which snapshots do not copy.
	InMemory bool `json:"in_memory,omitempty"`
}

// StdlibMount is Descriptor.Mount for a file of the built guest's standard
// library (matplotlib keeps its fonts open there).
const StdlibMount = -1

// Descriptor is a file or directory the guest holds open, which a resumed
// session opens again at the same descriptor number.
type Descriptor struct {
	// FD is the descriptor's number, at least 3 (after stdio) and below
	// MaxFD.
	FD int32 `json:"fd"`
	// Mount is the index into Header.Mounts of the mount it is in, or
	// StdlibMount for the built guest's standard library (/usr), which is
	// no mount of the session's but the guest build's, named by the
	// snapshot.
	Mount int `json:"mount"`
	// Path is where it is, relative to the mount: clean, slash-separated,
	// "." for the mount's root directory itself; at most MaxPath bytes.
	Path string `json:"path"`
	// Dir marks a directory (opened for reading only).
	Dir bool `json:"dir,omitempty"`
	// The access it was opened with, and its flags.
	Read     bool `json:"read,omitempty"`
	Write    bool `json:"write,omitempty"`
	Append   bool `json:"append,omitempty"`
	Nonblock bool `json:"nonblock,omitempty"`
	Sync     bool `json:"sync,omitempty"`
	// Offset is the file's offset, 0 or more.
	Offset int64 `json:"offset,omitempty"`
}

// Header is the uncompressed part of a snapshot: everything but the
// memory pages and the file contents.
type Header struct {
	// Guest is the guest build's ID (the SHA-256 of its binary).
	Guest string `json:"guest"`
	// Base identifies the base image the pages are relative to.
	Base string `json:"base"`
	// MemorySize is the size of linear memory in bytes.
	MemorySize uint64 `json:"memory_size"`
	// AsyncifyBuffer is the address of the asyncify data buffer, or 0 for
	// a guest that is idle between runs rather than paused (format
	// version 3 and later).
	AsyncifyBuffer uint32 `json:"asyncify_buffer"`
	// Globals are the guest's exported mutable globals.
	Globals []Global `json:"globals"`
	// Args and Env are the WASI set-up the guest was started with.
	Args []string          `json:"args"`
	Env  map[string]string `json:"env,omitempty"`
	// Mounts is the mount layout, in preopen order.
	Mounts []Mount `json:"mounts"`
	// Session state the host keeps.
	Runs          int64  `json:"runs"`
	FuelUsed      int64  `json:"fuel_used"`
	Deterministic bool   `json:"deterministic,omitempty"`
	Seed          uint64 `json:"seed,omitempty"`
	ClockNanos    int64  `json:"clock_nanos,omitempty"`
	// Descriptors are the files and directories the guest holds open, in
	// increasing FD order (format version 2).
	Descriptors []Descriptor `json:"descriptors,omitempty"`
}

// Page is one PageSize piece of linear memory.
type Page struct {
	Index uint32 // the page's offset in memory divided by PageSize
	Data  []byte // exactly PageSize bytes
}

// File kinds.
const (
	KindDir  = 0
	KindFile = 1
)

// File is one entry of an in-memory filesystem.
type File struct {
	Mount   int    // index into Header.Mounts
	Path    string // slash-separated, relative to the mount, clean, not empty
	Kind    uint8
	Mode    uint32 // permission bits
	ModTime int64  // Unix nanoseconds
	Data    []byte // a file's content
}

// Snapshot is a decoded snapshot.
type Snapshot struct {
	Header Header
	Pages  []Page // in increasing Index order
	Files  []File // parents before children
}

// Limits bound what Decode accepts.
type Limits struct {
	// MaxSize bounds the encoded snapshot in bytes.
	MaxSize int64
	// MaxMemory bounds Header.MemorySize.
	MaxMemory uint64
	// MaxFileBytes and MaxFiles bound the files' total size and number.
	MaxFileBytes int64
	MaxFiles     int64
}

// Encode writes s to w. It refuses, with an error matching ErrLimit, a
// header that Decode would refuse for its size (MaxHeader, MaxArgs, …).
func Encode(w io.Writer, s *Snapshot) error {
	header, err := json.Marshal(&s.Header)
	if err != nil {
		return err
	}
	if err := checkCounts(&s.Header, ErrLimit); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if len(header) > MaxHeader || countValues(header) > MaxHeaderValues {
		return fmt.Errorf("snapshot: %w: a header of %d bytes (at most %d) or more than %d values", ErrLimit, len(header), MaxHeader, MaxHeaderValues)
	}
	// The body's length comes before it and the checksum covers both. A
	// compressed body of at most maxKept bytes (a small session's is a few
	// hundred KB) is kept from compressing it once; a larger one is
	// compressed twice, first only to count its bytes, so that it is never
	// held (a full session's is hundreds of MB). s must not change
	// meanwhile; the checksum is of the bytes written.
	enc, err := getEncoder()
	if err != nil {
		return err
	}
	defer encoders.Put(enc)
	var count countingWriter
	kept := &keepWriter{max: maxKept}
	count.w = kept
	if err := compressBody(enc, &count, s); err != nil {
		return err
	}
	h := sha256.New()
	out := io.MultiWriter(w, h)
	var buf [8]byte
	put32 := func(v uint32) error {
		binary.LittleEndian.PutUint32(buf[:4], v)
		_, err := out.Write(buf[:4])
		return err
	}
	if _, err := out.Write(magic); err != nil {
		return err
	}
	if err := put32(Version); err != nil {
		return err
	}
	if err := put32(uint32(len(header))); err != nil {
		return err
	}
	if _, err := out.Write(header); err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(buf[:], uint64(count.n))
	if _, err := out.Write(buf[:]); err != nil {
		return err
	}
	body := countingWriter{w: out}
	if !kept.over {
		if _, err := body.Write(kept.buf); err != nil {
			return err
		}
	} else if err := compressBody(enc, &body, s); err != nil {
		return err
	}
	if body.n != count.n {
		return fmt.Errorf("snapshot: the body changed while it was encoded (%d bytes, then %d)", count.n, body.n)
	}
	_, err = w.Write(h.Sum(nil))
	return err
}

// encoders and decoders keep zstd coders between snapshots: a new one
// allocates and clears its window's buffers (4 MiB) on first use, about
// 0.7 ms of a small session's snapshot and 0.5 ms of its resume. A coder
// is Reset for each stream, which forgets the last one.
var (
	encoders sync.Pool // *zstd.Encoder
	decoders sync.Pool // *zstd.Decoder
)

// getEncoder returns an encoder with Encode's options, pooled or new.
func getEncoder() (*zstd.Encoder, error) {
	if enc, ok := encoders.Get().(*zstd.Encoder); ok {
		return enc, nil
	}
	return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(maxWindow))
}

// getDecoder returns a decoder of r that decodes at most maxMemory bytes
// at once and a window of at most maxWindow, pooled or new.
func getDecoder(r io.Reader, maxMemory uint64) (*zstd.Decoder, error) {
	if dec, ok := decoders.Get().(*zstd.Decoder); ok {
		if err := dec.ResetWithOptions(r, zstd.WithDecoderMaxMemory(maxMemory)); err != nil {
			dec.Close()
			return nil, err
		}
		return dec, nil
	}
	return zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(maxMemory), zstd.WithDecoderMaxWindow(maxWindow))
}

// putDecoder lets go of a decoder's stream and pools it.
func putDecoder(dec *zstd.Decoder) {
	if dec.Reset(nil) == nil {
		decoders.Put(dec)
	}
}

// compressBody writes the body, compressed with enc, to w: the same
// bytes every time for the same snapshot.
func compressBody(enc *zstd.Encoder, w io.Writer, s *Snapshot) error {
	enc.Reset(w)
	if err := encodeBody(enc, s); err != nil {
		enc.Close()
		return err
	}
	return enc.Close()
}

// countingWriter counts the bytes written to w (none: only counts).
// maxKept is the largest compressed body Encode keeps instead of
// compressing it a second time.
const maxKept = 1 << 20

// keepWriter keeps what is written to it up to max bytes; past it (over),
// it drops it all and keeps nothing more.
type keepWriter struct {
	buf  []byte
	max  int
	over bool
}

func (k *keepWriter) Write(p []byte) (int, error) {
	switch {
	case k.over:
	case len(k.buf)+len(p) > k.max:
		k.buf, k.over = nil, true
	default:
		k.buf = append(k.buf, p...)
	}
	return len(p), nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n := len(p)
	var err error
	if c.w != nil {
		n, err = c.w.Write(p)
	}
	c.n += int64(n)
	return n, err
}

// encodeBody writes the pages and the files:
//
//	page count uint32, then per page: index uint32, PageSize bytes
//	file count uint32, then per file: mount uint32, kind uint8, mode uint32,
//	  mtime int64, path length uint32, path, data length uint64, data
func encodeBody(w io.Writer, s *Snapshot) error {
	bw := &binWriter{w: w}
	bw.u32(uint32(len(s.Pages)))
	for _, p := range s.Pages {
		if len(p.Data) != PageSize {
			return fmt.Errorf("snapshot: page %d has %d bytes", p.Index, len(p.Data))
		}
		bw.u32(p.Index)
		bw.bytes(p.Data)
	}
	bw.u32(uint32(len(s.Files)))
	for _, f := range s.Files {
		bw.u32(uint32(f.Mount))
		bw.bytes([]byte{f.Kind})
		bw.u32(f.Mode)
		bw.u64(uint64(f.ModTime))
		bw.u32(uint32(len(f.Path)))
		bw.bytes([]byte(f.Path))
		bw.u64(uint64(len(f.Data)))
		bw.bytes(f.Data)
	}
	return bw.err
}

type binWriter struct {
	w   io.Writer
	buf [8]byte
	err error
}

func (b *binWriter) bytes(p []byte) {
	if b.err == nil {
		_, b.err = b.w.Write(p)
	}
}

func (b *binWriter) u32(v uint32) {
	binary.LittleEndian.PutUint32(b.buf[:4], v)
	b.bytes(b.buf[:4])
}

func (b *binWriter) u64(v uint64) {
	binary.LittleEndian.PutUint64(b.buf[:], v)
	b.bytes(b.buf[:])
}

// Decode reads and checks a snapshot, and returns it whole. Every error
// matches ErrFormat, ErrVersion, ErrCorrupt or ErrLimit. It reads r as
// Stream does; what it allocates is bounded by lim (the memory pages and
// the files it allows) plus a fixed amount for the header and the
// decompression.
func Decode(r io.Reader, lim Limits) (*Snapshot, error) {
	c := &collector{}
	if err := Stream(r, lim, c); err != nil {
		return nil, err
	}
	return &c.s, nil
}

// Target receives the parts of a snapshot as Stream decodes them.
type Target interface {
	// Header is called with the header, checked (against the Limits
	// too), before the body is read.
	Header(h *Header) error
	// Page is called with each page, in increasing index order, each
	// index below the header's MemorySize / PageSize. data is PageSize
	// bytes, which the decoder reuses after the call.
	Page(index uint32, data []byte) error
	// File is called with each file and directory, parents first, with
	// f.Data nil: a file's content, size bytes, is read from data (what
	// the target leaves unread is skipped). size is within the Limits;
	// a crafted snapshot may hold fewer bytes, which fails data's Read.
	File(f File, data io.Reader, size int64) error
}

// Stream reads and checks a snapshot, handing its parts to t as they are
// decoded: it never holds the encoded body, nor more of the decoded one
// than a page or a file (plus the decompressor's window, at most 4 MiB).
// Every error matches ErrFormat, ErrVersion, ErrCorrupt or ErrLimit, or
// is one t returned.
//
// It reads r as a stream and never more than lim.MaxSize bytes (and one
// more, to tell a snapshot that is too large). It checks the magic, the
// version and the header's length (at most MaxHeader) first; then it
// counts the header's values (at most MaxHeaderValues) and parses it,
// and decodes the body as it arrives, hashing every byte. A snapshot
// whose checksum does not match is ErrCorrupt, whatever else is wrong
// with it: when the header, the body or t fails, Stream reads the rest of
// the snapshot (without keeping it) and returns that error only if the
// checksum matches. So t may have been handed parts of a snapshot Stream
// then refuses: it must not act on them before Stream returns nil.
func Stream(r io.Reader, lim Limits, t Target) error {
	br := &boundedReader{r: r, left: lim.MaxSize}
	sum := sha256.New()
	hr := io.TeeReader(br, sum) // every byte before the checksum is hashed
	readErr := func(what string, err error) error {
		if errors.Is(err, errTooLarge) {
			return fmt.Errorf("%w: larger than %d bytes", ErrLimit, lim.MaxSize)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: truncated in the %s", ErrCorrupt, what)
		}
		return fmt.Errorf("%w: reading the %s: %w", ErrCorrupt, what, err)
	}
	var prefix [prefixLen]byte
	n, err := io.ReadFull(hr, prefix[:])
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return readErr("prefix", err)
	}
	got := prefix[:n]
	if len(got) < len(magic) || !bytes.Equal(got[:len(magic)], magic) {
		if len(got) < len(magic) && bytes.HasPrefix(magic, got) {
			return fmt.Errorf("%w: truncated to %d bytes", ErrCorrupt, len(got))
		}
		return ErrFormat
	}
	if n < prefixLen {
		return fmt.Errorf("%w: truncated to %d bytes", ErrCorrupt, n)
	}
	version := binary.LittleEndian.Uint32(prefix[12:])
	if version < MinVersion || version > Version {
		return fmt.Errorf("%w: %d (this build reads %d to %d)", ErrVersion, version, MinVersion, Version)
	}
	hlen := binary.LittleEndian.Uint32(prefix[16:])
	if hlen > MaxHeader {
		return fmt.Errorf("%w: a header of %d bytes, at most %d allowed", ErrCorrupt, hlen, MaxHeader)
	}
	header := make([]byte, hlen)
	if _, err := io.ReadFull(hr, header); err != nil {
		return readErr("header", err)
	}
	var blenBuf [8]byte
	if _, err := io.ReadFull(hr, blenBuf[:]); err != nil {
		return readErr("body length", err)
	}
	blen := binary.LittleEndian.Uint64(blenBuf[:])
	if blen > uint64(max(br.left-checksumLen, 0)) {
		// Too long for MaxSize: tell a snapshot that is really that long
		// from a damaged length, without keeping what is read.
		if _, err := io.Copy(io.Discard, io.LimitReader(br, int64(min(blen, 1<<62))+checksumLen)); err != nil {
			return readErr("body", err)
		}
		return fmt.Errorf("%w: body length %d past the end", ErrCorrupt, blen)
	}
	body := &io.LimitedReader{R: hr, N: int64(blen)}

	// What is wrong, if anything, once the checksum matches.
	var h Header
	failed := decodeHeader(header, &h)
	header = nil
	if failed == nil {
		failed = checkHeader(&h, version, lim)
	}
	if failed == nil && version < 2 && len(h.Descriptors) > 0 {
		failed = fmt.Errorf("%w: descriptors in a version %d snapshot", ErrCorrupt, version)
	}
	if failed == nil {
		failed = t.Header(&h)
	}
	if failed == nil {
		failed = streamBody(body, &h, lim, t)
	}
	// The rest of the body, which the decoder did not need: hashed, not
	// kept.
	if _, err := io.Copy(io.Discard, body); err != nil {
		return readErr("body", err)
	}
	if body.N > 0 {
		return fmt.Errorf("%w: truncated in the body (%d of %d bytes)", ErrCorrupt, blen-uint64(body.N), blen)
	}
	var want [checksumLen]byte
	if _, err := io.ReadFull(br, want[:]); err != nil {
		return readErr("checksum", err)
	}
	var one [1]byte
	if n, err := io.ReadFull(br, one[:]); n > 0 {
		return fmt.Errorf("%w: data after the checksum", ErrCorrupt)
	} else if !errors.Is(err, io.EOF) {
		return readErr("end", err)
	}
	if !bytes.Equal(sum.Sum(nil), want[:]) {
		return fmt.Errorf("%w: checksum mismatch (truncated or damaged)", ErrCorrupt)
	}
	return failed
}

// streamBody decompresses the body from r and hands its pages and files
// to t.
func streamBody(r io.Reader, h *Header, lim Limits, t Target) error {
	maxPages := h.MemorySize / PageSize
	// What the body may hold once decompressed: every page, every file.
	maxBody := 8 + maxPages*(4+PageSize) + uint64(lim.MaxFileBytes) + uint64(lim.MaxFiles)*(4+1+4+8+4+4096+8)
	zr, err := getDecoder(r, maxBody+1)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	defer putDecoder(zr)
	bin := &binReader{r: io.LimitReader(zr, int64(min(maxBody, 1<<62)))}
	if err := decodeBody(bin, h, maxPages, lim, t); err != nil {
		return err
	}
	// Nothing may follow the files.
	var one [1]byte
	if n, _ := io.ReadFull(bin.r, one[:]); n != 0 {
		return fmt.Errorf("%w: data after the last file", ErrCorrupt)
	}
	return nil
}

// PageSlab copies pages into allocations of a MiB each (256 pages), not
// one each: a Target's way of keeping what Page hands it.
type PageSlab struct{ free []byte }

// Copy returns a copy of the page data, PageSize bytes, whose capacity
// ends with it.
func (s *PageSlab) Copy(data []byte) []byte {
	if len(s.free) == 0 {
		s.free = make([]byte, 256*PageSize)
	}
	p := s.free[:PageSize:PageSize]
	s.free = s.free[PageSize:]
	copy(p, data)
	return p
}

// collector is the Target of Decode: it keeps everything.
type collector struct {
	s    Snapshot
	slab PageSlab
}

func (c *collector) Header(h *Header) error {
	c.s.Header = *h
	return nil
}

func (c *collector) Page(index uint32, data []byte) error {
	c.s.Pages = append(c.s.Pages, Page{Index: index, Data: c.slab.Copy(data)})
	return nil
}

func (c *collector) File(f File, data io.Reader, size int64) error {
	if f.Kind == KindFile {
		// Grown as data arrives, so a length field cannot make it
		// allocate more than the body really holds.
		p := make([]byte, 0, min(size, 1<<20))
		for int64(len(p)) < size {
			if len(p) == cap(p) {
				p = slices.Grow(p, int(min(size, 2*int64(cap(p))))-len(p))
			}
			n, err := data.Read(p[len(p):cap(p)])
			p = p[:len(p)+n]
			if err != nil {
				return err
			}
		}
		f.Data = p
	}
	c.s.Files = append(c.s.Files, f)
	return nil
}

// dataReader reads a file's content from the body: left bytes. A
// failure (the body ends first) is the body's (b.err).
type dataReader struct {
	b    *binReader
	left int64
}

func (d *dataReader) Read(p []byte) (int, error) {
	if d.b.err != nil {
		return 0, d.b.err
	}
	if d.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > d.left {
		p = p[:d.left]
	}
	n, err := d.b.r.Read(p)
	d.left -= int64(n)
	switch {
	case err == io.EOF && d.left > 0:
		err = io.ErrUnexpectedEOF
	case err == io.EOF:
		err = nil
	}
	if err != nil {
		d.b.err = fmt.Errorf("truncated: %w", err)
		return n, d.b.err
	}
	return n, nil
}

// errTooLarge is what a boundedReader returns past its bound.
var errTooLarge = errors.New("snapshot: past the size limit")

// boundedReader reads at most left bytes of r, then fails with errTooLarge
// if r holds more, or io.EOF if it does not.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.left <= 0 {
		var one [1]byte
		n, err := io.ReadFull(b.r, one[:])
		switch {
		case n > 0:
			return 0, errTooLarge
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return 0, io.EOF
		default:
			return 0, err
		}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// decodeHeader parses the JSON header after counting its values, so that
// no header makes the decoder allocate more than a small multiple of
// MaxHeader, whatever lists it holds.
func decodeHeader(data []byte, h *Header) error {
	if n := countValues(data); n > MaxHeaderValues {
		return fmt.Errorf("%w: a header of more than %d values", ErrCorrupt, MaxHeaderValues)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(h); err != nil {
		return fmt.Errorf("%w: header: %w", ErrCorrupt, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: header: data after the JSON object", ErrCorrupt)
	}
	return checkCounts(h, ErrCorrupt)
}

// countValues counts the commas of a JSON text outside its strings: a
// bound on how many values (list elements, object members) it holds, less
// one per list or object.
func countValues(data []byte) int {
	n := 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ',':
			n++
		}
	}
	return n
}

// checkCounts checks the lengths of a header's lists against the fixed
// bounds. kind is the error the failure wraps.
func checkCounts(h *Header, kind error) error {
	switch {
	case len(h.Args) > MaxArgs:
		return fmt.Errorf("%w: %d arguments, at most %d allowed", kind, len(h.Args), MaxArgs)
	case len(h.Env) > MaxEnv:
		return fmt.Errorf("%w: %d environment variables, at most %d allowed", kind, len(h.Env), MaxEnv)
	case len(h.Mounts) > MaxMounts:
		return fmt.Errorf("%w: %d mounts, at most %d allowed", kind, len(h.Mounts), MaxMounts)
	case len(h.Globals) > MaxGlobals:
		return fmt.Errorf("%w: %d globals, at most %d allowed", kind, len(h.Globals), MaxGlobals)
	case len(h.Descriptors) > MaxDescriptors:
		return fmt.Errorf("%w: %d open descriptors, at most %d allowed", kind, len(h.Descriptors), MaxDescriptors)
	}
	return checkDescriptors(h, kind)
}

// checkDescriptors checks each descriptor: its number (3 to MaxFD, in
// increasing order, so each once), its mount, its path (at most MaxPath
// bytes, clean, relative) and its access (a directory is read only).
func checkDescriptors(h *Header, kind error) error {
	last := int32(2)
	for _, d := range h.Descriptors {
		switch {
		case d.FD <= last || d.FD >= MaxFD:
			return fmt.Errorf("%w: descriptor %d out of order or outside 3 to %d", kind, d.FD, MaxFD-1)
		case (d.Mount < 0 || d.Mount >= len(h.Mounts)) && d.Mount != StdlibMount:
			return fmt.Errorf("%w: descriptor %d in mount %d of %d", kind, d.FD, d.Mount, len(h.Mounts))
		case d.Mount == StdlibMount && (d.Write || d.Append):
			return fmt.Errorf("%w: descriptor %d of the read-only standard library opened for writing", kind, d.FD)
		case len(d.Path) > MaxPath:
			return fmt.Errorf("%w: descriptor %d has a path of %d bytes, at most %d allowed", kind, d.FD, len(d.Path), MaxPath)
		case d.Path != "." && !validPath(d.Path):
			return fmt.Errorf("%w: descriptor %d has an invalid path %q", kind, d.FD, d.Path)
		case d.Offset < 0:
			return fmt.Errorf("%w: descriptor %d has a negative offset", kind, d.FD)
		case !d.Read && !d.Write:
			return fmt.Errorf("%w: descriptor %d is neither readable nor writable", kind, d.FD)
		case d.Dir && (d.Write || d.Append || d.Offset != 0):
			return fmt.Errorf("%w: directory descriptor %d opened for writing or at an offset", kind, d.FD)
		}
		last = d.FD
	}
	return nil
}

func checkHeader(h *Header, version uint32, lim Limits) error {
	switch {
	case h.Guest == "" || h.Base == "":
		return fmt.Errorf("%w: no guest or base image ID", ErrCorrupt)
	case h.MemorySize == 0 || h.MemorySize%65536 != 0:
		return fmt.Errorf("%w: memory size %d (not a multiple of 64 KiB)", ErrCorrupt, h.MemorySize)
	case h.MemorySize > lim.MaxMemory:
		return fmt.Errorf("%w: %d bytes of memory, at most %d allowed", ErrLimit, h.MemorySize, lim.MaxMemory)
	case (h.AsyncifyBuffer == 0 && version < 3) || uint64(h.AsyncifyBuffer) >= h.MemorySize:
		return fmt.Errorf("%w: asyncify buffer at %d outside memory", ErrCorrupt, h.AsyncifyBuffer)
	case len(h.Mounts) == 0:
		return fmt.Errorf("%w: no mounts", ErrCorrupt)
	case h.Runs < 0 || h.FuelUsed < 0 || h.ClockNanos < 0:
		return fmt.Errorf("%w: negative counters", ErrCorrupt)
	}
	return nil
}

// decodeBody decodes the pages and the files, handing them to t.
func decodeBody(br *binReader, h *Header, maxPages uint64, lim Limits, t Target) error {
	n := br.u32()
	if br.err == nil && uint64(n) > maxPages {
		return fmt.Errorf("%w: %d pages for %d bytes of memory", ErrCorrupt, n, h.MemorySize)
	}
	page := make([]byte, PageSize)
	next := uint64(0) // the smallest index the next page may have
	for i := uint32(0); i < n && br.err == nil; i++ {
		idx := br.u32()
		if br.err == nil && (uint64(idx) < next || uint64(idx) >= maxPages) {
			return fmt.Errorf("%w: page index %d out of order or outside memory", ErrCorrupt, idx)
		}
		next = uint64(idx) + 1
		if br.read(page); br.err == nil {
			if err := t.Page(idx, page); err != nil {
				return err
			}
		}
	}
	nf := br.u32()
	if br.err == nil && int64(nf) > lim.MaxFiles {
		return fmt.Errorf("%w: %d files, at most %d allowed", ErrLimit, nf, lim.MaxFiles)
	}
	var total int64
	all, dirs := map[string]bool{}, map[string]bool{}
	for i := uint32(0); i < nf && br.err == nil; i++ {
		var f File
		f.Mount = int(br.u32())
		kind := br.bytes(1)
		f.Mode = br.u32()
		f.ModTime = int64(br.u64())
		plen := br.u32()
		if br.err != nil {
			break
		}
		if plen > MaxPath {
			return fmt.Errorf("%w: a path of %d bytes", ErrCorrupt, plen)
		}
		f.Path = string(br.bytes(int(plen)))
		dlen := br.u64()
		if br.err != nil {
			break
		}
		f.Kind = kind[0]
		if f.Mount < 0 || f.Mount >= len(h.Mounts) || !h.Mounts[f.Mount].InMemory {
			return fmt.Errorf("%w: file %q in mount %d, which is not an in-memory mount", ErrCorrupt, f.Path, f.Mount)
		}
		if !validPath(f.Path) {
			return fmt.Errorf("%w: invalid path %q", ErrCorrupt, f.Path)
		}
		key := fmt.Sprintf("%d\x00%s", f.Mount, f.Path)
		if all[key] {
			return fmt.Errorf("%w: %q twice", ErrCorrupt, f.Path)
		}
		if dir := path.Dir(f.Path); dir != "." && !dirs[fmt.Sprintf("%d\x00%s", f.Mount, dir)] {
			return fmt.Errorf("%w: %q comes before its directory", ErrCorrupt, f.Path)
		}
		all[key] = true
		dirs[key] = f.Kind == KindDir
		switch f.Kind {
		case KindDir:
			if dlen != 0 {
				return fmt.Errorf("%w: directory %q has data", ErrCorrupt, f.Path)
			}
		case KindFile:
			total += int64(min(dlen, 1<<62))
			if dlen > 1<<62 || total > lim.MaxFileBytes {
				return fmt.Errorf("%w: files of more than %d bytes in all", ErrLimit, lim.MaxFileBytes)
			}
		default:
			return fmt.Errorf("%w: file kind %d", ErrCorrupt, f.Kind)
		}
		if br.err != nil {
			break
		}
		data := &dataReader{b: br, left: int64(dlen)}
		err := t.File(f, data, int64(dlen))
		if br.err == nil && err == nil {
			// What the target did not read.
			_, err = io.Copy(io.Discard, data)
		}
		if br.err != nil {
			break
		}
		if err != nil {
			return err
		}
	}
	if br.err != nil {
		return fmt.Errorf("%w: body: %w", ErrCorrupt, br.err)
	}
	return nil
}

// validPath reports whether p is a clean, relative, slash-separated path
// naming something below a mount.
func validPath(p string) bool {
	return p != "" && p != "." && !strings.HasPrefix(p, "/") && path.Clean(p) == p &&
		p != ".." && !strings.HasPrefix(p, "../") && strings.IndexByte(p, 0) < 0
}

type binReader struct {
	r   io.Reader
	buf [8]byte
	err error
}

func (b *binReader) bytes(n int) []byte {
	if b.err != nil {
		return nil
	}
	p := make([]byte, 0, min(n, 1<<20))
	// Grow as data arrives, so a length field cannot make us allocate
	// more than the body really holds.
	for len(p) < n && b.err == nil {
		chunk := min(n-len(p), 1<<20)
		start := len(p)
		p = append(p, make([]byte, chunk)...)
		if _, err := io.ReadFull(b.r, p[start:]); err != nil {
			b.err = fmt.Errorf("truncated: %w", err)
		}
	}
	return p
}

// read fills p, which is small.
func (b *binReader) read(p []byte) {
	if b.err != nil {
		return
	}
	if _, err := io.ReadFull(b.r, p); err != nil {
		b.err = fmt.Errorf("truncated: %w", err)
	}
}

func (b *binReader) u32() uint32 {
	if b.err != nil {
		return 0
	}
	if _, err := io.ReadFull(b.r, b.buf[:4]); err != nil {
		b.err = fmt.Errorf("truncated: %w", err)
		return 0
	}
	return binary.LittleEndian.Uint32(b.buf[:4])
}

func (b *binReader) u64() uint64 {
	if b.err != nil {
		return 0
	}
	if _, err := io.ReadFull(b.r, b.buf[:]); err != nil {
		b.err = fmt.Errorf("truncated: %w", err)
		return 0
	}
	return binary.LittleEndian.Uint64(b.buf[:])
}
