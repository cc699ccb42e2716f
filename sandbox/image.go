package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fumehood/fumehood/internal/pipeline"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/fumehood/fumehood/internal/snapshot"
)

// pageSize is the granularity at which session memory is compared, kept
// and restored.
const pageSize = snapshot.PageSize

// wasmPage is the unit in which linear memory grows.
const wasmPage = 65536

// baseImage is an interpreter right after start-up: CPython started and
// the driver loaded (fumehood_init), idle until its first request. It
// is taken once per guest and mount layout, deterministically (fixed clock,
// seeded randomness, PYTHONHASHSEED=0), so that every process builds the
// same one and snapshots can store only the pages that differ from it.
type baseImage struct {
	layout string
	digest string   // SHA-256 of the memory
	size   int      // the memory's size in bytes
	pages  [][]byte // its pages after fumehood_init (nil: zeros); never written
	// fresh lists the pages that differ from the memory of a freshly
	// instantiated module, which are all a restore must write.
	fresh []uint32
}

// page returns page i of the base image, or nil past its end (zeros).
func (b *baseImage) page(i int) []byte {
	if i < 0 || (i+1)*pageSize > b.size {
		return nil
	}
	if p := b.pages[i]; p != nil {
		return p
	}
	return zeroPage
}

// sparsePages returns mem's pages, cloned, with nil for pages of zeros:
// most of an image (the built guest's: 1,640 of 7,168 pages hold
// anything), which a process then neither copies nor touches.
func sparsePages(mem []byte) [][]byte {
	pages := make([][]byte, len(mem)/pageSize)
	for i := range pages {
		if p := mem[i*pageSize : (i+1)*pageSize]; !bytes.Equal(p, zeroPage) {
			pages[i] = bytes.Clone(p)
		}
	}
	return pages
}

var zeroPage = make([]byte, pageSize)

// checkpoint is a session's state between runs, kept as the pages that
// differ from the base image. A page shared with a fork or a snapshot
// being encoded (share), or unpacked from hibernation, is never written:
// an update replaces it with a copy, so forks share what neither changed.
// Pages the checkpoint allocated itself (or a resume decoded into it)
// since it was last shared (owned) are updated in place.
type checkpoint struct {
	size   uint64   // memory size in bytes
	pages  [][]byte // nil where the page equals the base image's
	owned  []bool   // pages[i] is this checkpoint's alone
	packed *packed  // while hibernating: the pages, compressed (pack.go)
}

// update records mem's pages as the new checkpoint. The
// first dead pages are left as they were: a stack that is empty between
// runs (see Guest.deadStack). Pages marked in zero (which may be nil) are
// known to hold zeros without reading them (unpopulated): reading would
// make the kernel allocate them.
// A set stop ends it early (see Session.takeCheckpoint).
func (c *checkpoint) update(base *baseImage, mem []byte, dead int, zero []bool, stop *atomic.Bool) {
	n := c.resize(mem)
	for i := min(dead, n); i < n; i++ {
		if stopped(stop) {
			return
		}
		cur := mem[i*pageSize : (i+1)*pageSize]
		if i < len(zero) && zero[i] {
			cur = zeroPage
		}
		c.updatePage(base, cur, i)
	}
}

// updateWritten is update when the checkpoint holds mem but for the
// pages listed in written (the pages written since it was last updated):
// only those are compared.
func (c *checkpoint) updateWritten(base *baseImage, mem []byte, dead int, written []uint32, stop *atomic.Bool) {
	n := c.resize(mem)
	for _, i := range written {
		if stopped(stop) {
			return
		}
		if int(i) >= dead && int(i) < n {
			c.updatePage(base, mem[int(i)*pageSize:(int(i)+1)*pageSize], int(i))
		}
	}
}

// resize fits the page table to mem, records its size,
// and returns its number of pages. Pages it adds equal the base's (or
// zeros past it), as memory grown since does where it was not written.
func (c *checkpoint) resize(mem []byte) int {
	n := len(mem) / pageSize
	if len(c.pages) < n {
		c.pages = append(c.pages, make([][]byte, n-len(c.pages))...)
	}
	c.pages = c.pages[:n]
	if len(c.owned) < n {
		c.owned = append(c.owned, make([]bool, n-len(c.owned))...)
	}
	c.size = uint64(len(mem))
	return n
}

// updatePage records cur as page i, if it changed.
func (c *checkpoint) updatePage(base *baseImage, cur []byte, i int) {
	ref := c.pages[i]
	if ref == nil {
		if ref = base.page(i); ref == nil {
			ref = zeroPage
		}
	}
	if bytes.Equal(cur, ref) {
		return
	}
	if c.owned[i] {
		copy(c.pages[i], cur)
	} else {
		c.pages[i], c.owned[i] = bytes.Clone(cur), true
	}
}

// share marks every page shared: the checkpoint no longer writes any in
// place, so whoever holds them (a fork, a snapshot being encoded) reads
// them unchanged.
func (c *checkpoint) share() { clear(c.owned) }

// clone returns a copy that shares the pages, which neither may write from
// now on.
func (c *checkpoint) clone() *checkpoint {
	c.share()
	return &checkpoint{size: c.size, pages: append([][]byte(nil), c.pages...)}
}

// restore writes the checkpoint into the memory of a freshly instantiated
// module: the pages where the base differs from a fresh memory, then the
// checkpoint's own pages.
func (c *checkpoint) restore(base *baseImage, mod api.Module, lm func() []byte) error {
	mem := mod.Memory()
	if mem == nil {
		return fmt.Errorf("sandbox: the guest has no memory")
	}
	if have := uint64(mem.Size()); have < c.size {
		if _, ok := mem.Grow(uint32((c.size - have) / wasmPage)); !ok {
			return fmt.Errorf("%w: the session needs %d bytes of memory", ErrMemoryLimit, c.size)
		}
	} else if have > c.size {
		return fmt.Errorf("sandbox: a fresh instance has %d bytes of memory, more than the session's %d", have, c.size)
	}
	buf := lm()
	for _, i := range base.fresh {
		if int(i) < len(c.pages) && c.pages[i] != nil {
			continue
		}
		if p := base.page(int(i)); p != nil && int(i+1)*pageSize <= len(buf) {
			copy(buf[int(i)*pageSize:], p)
		}
	}
	for i, p := range c.pages {
		if p != nil {
			copy(buf[i*pageSize:], p)
		}
	}
	return nil
}

// digestImage identifies a base image by its content: its memory, then
// four zero bytes (where images of the retired session build had the
// address of their pause buffer), so that the digests of the images in
// existing caches and snapshots stay what they were.
func digestImage(mem []byte) string {
	h := sha256.New()
	h.Write(mem)
	h.Write(make([]byte, 4))
	return hex.EncodeToString(h.Sum(nil))
}

// layoutKey names a mount layout: the preopens in order, and whether each
// is read-only.
func layoutKey(mounts []snapshot.Mount) string {
	var sb strings.Builder
	for _, m := range mounts {
		sb.WriteString(m.Path)
		if m.ReadOnly {
			sb.WriteString(":ro")
		}
		sb.WriteByte(0)
	}
	return sb.String()
}

// baseImages builds each base image once per guest, however many sessions
// ask for it at once, and keeps the maxBaseImages used last: every mount
// layout (the paths of a sandbox's mounts) has its own, of about 20 MB,
// and the one-shot runs of a server that mounts a volume at a path of each
// request's choosing would otherwise keep one per path. An image evicted
// stays alive for the sessions that hold it. The cache directory keeps as
// many per guest, also the ones used last (evictBaseFiles).
type baseImages struct {
	mu     sync.Mutex
	images map[string]*baseEntry
	tick   uint64
}

// maxBaseImages bounds the base images a guest keeps in memory.
const maxBaseImages = 8

type baseEntry struct {
	done chan struct{}
	img  *baseImage
	err  error
	used uint64 // the tick of its last use
}

// evictLocked drops the least recently used built images past
// maxBaseImages.
func (b *baseImages) evictLocked() {
	for len(b.images) > maxBaseImages {
		var oldest string
		var at uint64
		for k, e := range b.images {
			select {
			case <-e.done:
			default:
				continue // being built
			}
			if oldest == "" || e.used < at {
				oldest, at = k, e.used
			}
		}
		if oldest == "" {
			return
		}
		delete(b.images, oldest)
	}
}

// get returns the base image for layout, building it with build on first use.
func (b *baseImages) get(ctx context.Context, layout string, build func(context.Context) (*baseImage, error)) (*baseImage, error) {
	b.mu.Lock()
	if b.images == nil {
		b.images = map[string]*baseEntry{}
	}
	b.tick++
	e := b.images[layout]
	if e != nil {
		e.used = b.tick
	}
	if e == nil {
		e = &baseEntry{done: make(chan struct{}), used: b.tick}
		b.images[layout] = e
		b.evictLocked()
		b.mu.Unlock()
		// Not canceled with the first caller's context: others may be
		// waiting for the image, each until its own context is done.
		e.img, e.err = build(context.WithoutCancel(ctx))
		if e.err != nil {
			// Let a later caller try again.
			b.mu.Lock()
			if b.images[layout] == e {
				delete(b.images, layout)
			}
			b.mu.Unlock()
		}
		close(e.done)
	} else {
		b.mu.Unlock()
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return e.img, e.err
}

// base returns the base image for a layout: from memory, else from the
// cache directory, else built (and then cached, for the next process).
func (g *Guest) base(ctx context.Context, layout []snapshot.Mount) (*baseImage, error) {
	return g.bases.get(ctx, layoutKey(layout), func(ctx context.Context) (*baseImage, error) {
		file := g.baseFile(layout)
		if b, err := g.loadBase(ctx, file, layout); err == nil {
			return b, nil
		}
		b, err := g.buildBase(ctx, layout)
		if err == nil && file != "" {
			g.cacheBase(file, b, layout)
		}
		return b, err
	})
}

// cacheBase writes a base image built for layout to the cache file file,
// with its fresh pages, and evicts the guest's images used least recently
// past maxBaseImages. A failure to cache costs the next process time,
// nothing else.
func (g *Guest) cacheBase(file string, b *baseImage, layout []snapshot.Mount) {
	if g.saveBase(file, b, layout) != nil {
		return
	}
	_ = writeFresh(file, b.digest, b.fresh)
	useBaseFile(file)
	evictBaseFiles(file)
}

// baseFile names the cache file of a layout's base image: it depends on
// the guest build (with its standard library), the driver and the layout.
func (g *Guest) baseFile(layout []snapshot.Mount) string {
	id := g.imageID
	if id == "" {
		id = g.id
	}
	return baseFileName(g.cacheDir, id, g.sessionSource(), layout)
}

// baseFileName names the cache file of the base image of a guest build
// with a driver source, for a layout: in a directory per guest build and
// source under sessions/, which holds at most maxBaseImages of them
// (evictBaseFiles).
func baseFileName(cacheDir, guest, source string, layout []snapshot.Mount) string {
	if cacheDir == "" {
		return ""
	}
	h := sha256.New()
	h.Write([]byte(guest))
	h.Write([]byte(source))
	dir := hex.EncodeToString(h.Sum(nil))[:16]
	h.Write([]byte(layoutKey(layout)))
	return filepath.Join(cacheDir, "sessions", dir, hex.EncodeToString(h.Sum(nil))[:32]+".base")
}

// evictBaseFiles keeps, of the base images in the directory of file (one
// guest's), file and the others used last, maxBaseImages in all, as the
// guest keeps in memory: a file's modification time is when it was written
// or last loaded (useBaseFile).
// It deletes the others with their fresh-page files, and fresh-page files
// whose image is gone. A process that is reading an image deleted meanwhile
// still reads all of it (an unlinked file stays readable while open, and
// an image is decoded into memory, never mapped); one that opens it after
// builds it again.
func evictBaseFiles(file string) {
	dir, keep := filepath.Split(file)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type image struct {
		name string
		used time.Time
	}
	var images []image
	bases := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".base") {
			continue
		}
		bases[name] = true
		if fi, err := e.Info(); err == nil {
			images = append(images, image{name, fi.ModTime()})
		}
	}
	sort.Slice(images, func(i, j int) bool {
		a, b := images[i], images[j]
		if (a.name == keep) != (b.name == keep) {
			return a.name == keep
		}
		if !a.used.Equal(b.used) {
			return a.used.After(b.used)
		}
		return a.name < b.name
	})
	for _, im := range images[min(len(images), maxBaseImages):] {
		_ = os.Remove(filepath.Join(dir, im.name))
		_ = os.Remove(freshFile(filepath.Join(dir, im.name)))
		delete(bases, im.name)
	}
	for _, e := range entries {
		if base, ok := strings.CutSuffix(e.Name(), ".fresh"); ok && !strings.HasPrefix(base, ".") && !bases[base] {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// useBaseFile marks the base image in file as used now, for
// evictBaseFiles.
func useBaseFile(file string) {
	now := time.Now()
	_ = os.Chtimes(file, now, now)
}

// defaultLayout is the mount layout of a session with no mounts.
var defaultLayout = []snapshot.Mount{{Path: "/", InMemory: true}, {Path: controlPath}}

// prefetch reads and decodes a cached base image on its own goroutine, so
// that a process which compiles the guest and resumes a session (the
// command line) does both at once.
type prefetch struct {
	file string
	done chan struct{}
	snap *snapshot.Snapshot
	err  error
}

func startPrefetch(file string) *prefetch {
	p := &prefetch{file: file, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.snap, p.err = readBase(file)
	}()
	return p
}

// readBase reads and decodes a cached base image.
func readBase(file string) (*snapshot.Snapshot, error) {
	if file == "" {
		return nil, os.ErrNotExist
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return snapshot.Decode(bufio.NewReader(f), snapshot.Limits{MaxSize: 1 << 32, MaxMemory: 1 << 32})
}

// saveBase writes a base image in the snapshot format: its non-zero pages.
func (g *Guest) saveBase(file string, b *baseImage, layout []snapshot.Mount) error {
	snap := &snapshot.Snapshot{Header: snapshot.Header{
		Guest: g.id, Base: b.digest, MemorySize: uint64(b.size),
		Args: snapshotArgs, Mounts: layout,
	}}
	for i, p := range b.pages {
		if p != nil {
			snap.Pages = append(snap.Pages, snapshot.Page{Index: uint32(i), Data: p})
		}
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(file), ".base-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	w := bufio.NewWriter(f)
	if err := snapshot.Encode(w, snap); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}

// loadBase reads a cached base image and checks it against its digest.
func (g *Guest) loadBase(ctx context.Context, file string, layout []snapshot.Mount) (*baseImage, error) {
	var snap *snapshot.Snapshot
	var err error
	if p := g.prefetched.Load(); p != nil && p.file == file && g.prefetched.CompareAndSwap(p, nil) {
		// Used once: the image is kept in g.bases from now on.
		<-p.done
		snap, err = p.snap, p.err
	} else {
		snap, err = readBase(file)
	}
	if err != nil {
		return nil, err
	}
	h := &snap.Header
	if err := checkRetired(h); err != nil {
		return nil, err
	}
	if h.Guest != g.id || layoutKey(h.Mounts) != layoutKey(layout) {
		return nil, errors.New("sandbox: cached base image of another build")
	}
	if h.MemorySize > DefaultMemoryLimit {
		// It was built within DefaultMemoryLimit: a larger one is not ours,
		// and allocating its memory would cost more than any session may.
		return nil, fmt.Errorf("sandbox: cached base image of %d bytes, over the memory limit", h.MemorySize)
	}
	b := &baseImage{layout: layoutKey(layout), size: int(h.MemorySize), pages: make([][]byte, h.MemorySize/pageSize)}
	for _, p := range snap.Pages {
		if int(p.Index) >= len(b.pages) || len(p.Data) != pageSize {
			return nil, fmt.Errorf("sandbox: cached base image with page %d outside its memory", p.Index)
		}
		b.pages[p.Index] = p.Data // the decoder's own buffer, never written
	}
	// The snapshot's checksum vouches for the content, so the digest is
	// taken as written rather than computed again (25 ms).
	b.digest = h.Base
	useBaseFile(file)
	if b.fresh = readFresh(file, b.digest); b.fresh == nil {
		if err := g.freshPages(ctx, b); err != nil {
			return nil, err
		}
		// A failure to cache costs the next process time, nothing else.
		_ = writeFresh(file, b.digest, b.fresh)
	}
	return b, nil
}

// buildBase starts the interpreter in a stand-in of the layout (empty
// in-memory filesystems at the same paths), deterministically, and keeps
// its state once fumehood_init has returned.
func (g *Guest) buildBase(ctx context.Context, layout []snapshot.Mount) (*baseImage, error) {
	var mounts, others []Mount
	for _, m := range layout {
		if m.Path != "/" && m.Path != controlPath && m.Path != hostMountPath {
			others = append(others, Mount{Path: m.Path})
		}
	}
	for _, m := range layout {
		fs := afero.NewMemMapFs()
		if m.Path == "/" {
			if err := makeRoot(fs, others); err != nil {
				return nil, err
			}
		}
		// Start-up records what it stats (the import system keeps the
		// times of directories), so every time is fixed.
		if err := afero.Walk(fs, "/", func(p string, _ iofs.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return fs.Chtimes(p, deterministicEpoch, deterministicEpoch)
		}); err != nil {
			return nil, err
		}
		mounts = append(mounts, Mount{Path: m.Path, FS: fs, ReadOnly: m.ReadOnly})
	}
	sb, err := g.newSandbox(&Config{Mounts: mounts}, true)
	if err != nil {
		return nil, err
	}
	var in *instance
	clock := &sessionClock{in: &in}
	in, err = g.newInstance(ctx, sb.fscfg, clock, seededRand(0), map[string]string{"PYTHONHASHSEED": "0"}, DefaultMemoryLimit, 0)
	if err != nil {
		return nil, err
	}
	defer in.close()
	r := &runState{ctx: ctx}
	r.setClocks(ctx, true, 0, nil)
	var stderr bytes.Buffer
	in.stderr.w = &stderr
	if err := in.initDriver(ctx, r, DefaultFuel, &sb.errno, g.sessionSource()); err != nil {
		return nil, fmt.Errorf("sandbox: starting the session interpreter: %w (stderr: %q)", err, stderr.String())
	}
	mem := in.linear()
	b := &baseImage{layout: layoutKey(layout), size: len(mem), pages: sparsePages(mem)}
	b.digest = digestImage(mem)

	if err := g.freshPages(ctx, b); err != nil {
		return nil, err
	}
	return b, nil
}

// freshPages finds the pages a restore must write: those where the base
// image differs from the memory of a freshly instantiated module.
func (g *Guest) freshPages(ctx context.Context, b *baseImage) error {
	var in *instance
	fresh, err := g.newInstance(ctx, wazero.NewFSConfig(), &sessionClock{in: &in}, seededRand(0), nil, DefaultMemoryLimit, 0)
	if err != nil {
		return err
	}
	defer fresh.close()
	fm := fresh.linear()
	for i := 0; i < b.size/pageSize; i++ {
		ref := zeroPage
		if (i+1)*pageSize <= len(fm) {
			ref = fm[i*pageSize : (i+1)*pageSize]
		}
		if !bytes.Equal(b.page(i), ref) {
			b.fresh = append(b.fresh, uint32(i))
		}
	}
	return nil
}

// deadStack is how many pages at the bottom of memory hold nothing alive
// between two runs of a guest with the driver: its C stack comes first
// (wasm-ld --stack-first, below every data segment) and is empty whenever
// no call is running, so what the last run left there is garbage no
// well-defined program reads before writing. A checkpoint does not compare
// those pages (8 MiB of the built guest's 20: the largest part of what
// every run's checkpoint reads), and a rollback, fork or resume gets the
// base image's. It is 0 for a build whose stack is not first.
func (g *Guest) deadStack() int {
	if !g.stack.ok || !g.stack.first {
		return 0
	}
	return int(g.stack.top / pageSize)
}

// The pages where a base image differs from a fresh instance's memory
// (baseImage.fresh) are found by instantiating the guest and comparing
// all of its memory: 130 ms for the built guest's 28 MiB, where every
// page a process touches first costs a fault. A process that loads the
// image from the cache (the command line, once per run) reads them from
// a file beside it instead: the image's digest, then the page indexes,
// little-endian uint32 each.

// freshFile names the file that lists the fresh pages of the base image
// in file.
func freshFile(file string) string { return file + ".fresh" }

// readFresh reads the fresh pages of the image with digest, or nil if the
// file is missing, of another image, or malformed.
func readFresh(file, digest string) []uint32 {
	if file == "" {
		return nil
	}
	b, err := os.ReadFile(freshFile(file))
	if err != nil || len(b) < len(digest) || string(b[:len(digest)]) != digest || (len(b)-len(digest))%4 != 0 {
		return nil
	}
	b = b[len(digest):]
	fresh := make([]uint32, 0, len(b)/4)
	for i := 0; i < len(b); i += 4 {
		fresh = append(fresh, binary.LittleEndian.Uint32(b[i:]))
	}
	if len(fresh) == 0 {
		return nil
	}
	return fresh
}

// writeFresh writes the fresh pages of the image with digest, atomically.
func writeFresh(file, digest string, fresh []uint32) error {
	if file == "" || len(fresh) == 0 {
		return nil
	}
	b := []byte(digest)
	for _, i := range fresh {
		b = binary.LittleEndian.AppendUint32(b, i)
	}
	return pipeline.WriteAtomic(freshFile(file), b)
}
