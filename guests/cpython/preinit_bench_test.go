package cpython_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/fumehood/fumehood/guests/cpython"
)

// The measurements that decide how sandbox will use the driver (issue 19,
// phase 2), recorded in bench/README.md ("Pre-initialized interpreter"):
//
//	go test ./guests/cpython -run '^$' -bench Preinit -benchtime 20x -count 3
//
// Each benchmark starts from an image: an instance that ran fumehood_init
// and one request (`x = 0`), its memory and globals captured.

var (
	benchImgOnce sync.Once
	benchImg     *image
)

// benchImage returns the image, made once per test binary.
func benchImage(b *testing.B) (*preinitGuest, *image) {
	g := loadPreinit(b)
	benchImgOnce.Do(func() {
		d, mod, out, errb := g.initialized(b, nil)
		run(b, d, 1, "x = 0", out, errb)
		fresh, err := g.instantiate(b, nil, io.Discard, io.Discard)
		require.NoError(b, err)
		defer fresh.Close(context.Background())
		benchImg = captureImage(b, mod, fresh, g.globals)
	})
	require.NotNil(b, benchImg)
	return g, benchImg
}

// sliceMem is a linear memory on a Go slice with capacity reserved up
// front, as sandbox's allocator does for a restored session, so growing to
// the image's size copies nothing.
type sliceMem struct{ buf []byte }

func (m *sliceMem) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.buf)) {
		nb := make([]byte, size, 2*size)
		copy(nb, m.buf)
		m.buf = nb
	}
	m.buf = m.buf[:size]
	return m.buf
}

func (m *sliceMem) Free() { m.buf = nil }

func reserving(n uint64) experimental.MemoryAllocator {
	return experimental.MemoryAllocatorFunc(func(c, _ uint64) experimental.LinearMemory {
		return &sliceMem{buf: make([]byte, 0, max(c, n))}
	})
}

// cowMem maps the image's file privately: the instance starts with the
// image's pages without copying them, and a page costs memory only when
// the instance writes it (copy on write). Its address never changes.
type cowMem struct{ m []byte }

func (c *cowMem) Reallocate(size uint64) []byte {
	if size > uint64(len(c.m)) {
		return nil
	}
	return c.m[:size]
}

func (c *cowMem) Free() {
	if c.m != nil {
		syscall.Munmap(c.m)
		c.m = nil
	}
}

// cowLimit is the most memory a copy-on-write instance may grow to.
const cowLimit = 256 << 20

// cowFile writes the image to a file in memory (/dev/shm), its size
// cowLimit (zeros past the image), for cowAlloc to map.
func cowFile(b *testing.B, img *image) *os.File {
	f, err := os.CreateTemp("/dev/shm", "fumehood-image-")
	if err != nil {
		b.Skipf("no /dev/shm: %v", err)
	}
	b.Cleanup(func() { f.Close(); os.Remove(f.Name()) })
	_, err = f.Write(img.mem)
	require.NoError(b, err)
	require.NoError(b, f.Truncate(cowLimit))
	return f
}

func cowAlloc(b *testing.B, f *os.File) experimental.MemoryAllocator {
	return experimental.MemoryAllocatorFunc(func(_, _ uint64) experimental.LinearMemory {
		m, err := syscall.Mmap(int(f.Fd()), 0, cowLimit, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
		if err != nil {
			b.Error(err)
			return &cowMem{}
		}
		return &cowMem{m: m}
	})
}

// restoreCow finishes a copy-on-write instance: wazero wrote the data
// segments over the image at instantiation, so the pages of the image that
// differ from a fresh instance's and that a fresh instance has non-zero
// (the data segments) are written again.
func (img *image) restoreCow(m api.Module, fresh []bool) error {
	buf, _ := m.Memory().Read(0, m.Memory().Size())
	for _, i := range img.diff {
		if int(i) < len(fresh) && fresh[i] {
			copy(buf[i*imagePage:(i+1)*imagePage], img.mem[i*imagePage:])
		}
	}
	for name, v := range img.globals {
		m.ExportedGlobal(name).(api.MutableGlobal).Set(v)
	}
	return nil
}

// freshNonZero lists which pages of a fresh instance's memory are not all
// zeros (the data segments).
func freshNonZero(b *testing.B, g *preinitGuest) []bool {
	m, err := g.instantiate(b, nil, io.Discard, io.Discard)
	require.NoError(b, err)
	defer m.Close(context.Background())
	buf, _ := m.Memory().Read(0, m.Memory().Size())
	zero := make([]byte, imagePage)
	nz := make([]bool, len(buf)/imagePage)
	for i := range nz {
		nz[i] = !bytes.Equal(buf[i*imagePage:(i+1)*imagePage], zero)
	}
	return nz
}

var printReq = []byte(`{"code": "print(1)"}`)

// BenchmarkPreinitOneShot is a one-shot run from the image: a new
// instance, the image written into it, fumehood_exec of print(1), close.
// "diff" writes only the pages that differ from a fresh instance, "full"
// the whole memory, "cow" maps the image copy-on-write and rewrites only
// the data segments' pages.
func BenchmarkPreinitOneShot(b *testing.B) {
	g, img := benchImage(b)
	nz := freshNonZero(b, g)
	f := cowFile(b, img)
	for _, mode := range []string{"diff", "full", "cow"} {
		for _, exec := range []bool{false, true} {
			name := mode + "/restore"
			if exec {
				name = mode + "/print"
			}
			b.Run(name, func(b *testing.B) {
				var out bytes.Buffer
				alloc := reserving(uint64(img.size))
				if mode == "cow" {
					alloc = cowAlloc(b, f)
				}
				ctx := experimental.WithMemoryAllocator(context.Background(), alloc)
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					out.Reset()
					m, err := g.rt.InstantiateModule(ctx, g.cm, g.config(nil, &out, io.Discard))
					require.NoError(b, err)
					if mode == "cow" {
						err = img.restoreCow(m, nz)
					} else {
						err = img.restore(m, mode == "diff")
					}
					require.NoError(b, err)
					if exec {
						d, err := cpython.Attach(m)
						require.NoError(b, err)
						o, err := d.Exec(ctx, printReq, 1<<20)
						require.NoError(b, err)
						if o.Exception != nil || out.String() != "1\n" {
							b.Fatalf("outcome %+v, stdout %q", o, out.String())
						}
					}
					m.Close(ctx)
				}
			})
		}
	}
	b.ReportMetric(float64(len(img.diff)), "diff-pages")
}

// BenchmarkPreinitExec is a request on a live instance: x += 1, the
// session round trip, and print(1).
func BenchmarkPreinitExec(b *testing.B) {
	g, img := benchImage(b)
	for _, code := range []string{"x += 1", "print(1)"} {
		b.Run(strings.ReplaceAll(code, " ", ""), func(b *testing.B) {
			ctx := experimental.WithMemoryAllocator(context.Background(), reserving(uint64(img.size)))
			m, err := g.rt.InstantiateModule(ctx, g.cm, g.config(nil, io.Discard, io.Discard))
			require.NoError(b, err)
			defer m.Close(ctx)
			require.NoError(b, img.restore(m, true))
			d, err := cpython.Attach(m)
			require.NoError(b, err)
			req, _ := json.Marshal(cpython.Request{Code: code})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := d.Exec(ctx, req, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPreinitInit is what the image saves: a new instance and
// fumehood_init (interpreter start-up, site, the driver's Python side),
// and, for comparison, _start of `python -c print(1)`, the one-shot path
// of today (without the sandbox's start-up code).
func BenchmarkPreinitInit(b *testing.B) {
	g := loadPreinit(b)
	ctx := context.Background()
	b.Run("init", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			m, err := g.rt.InstantiateModule(ctx, g.cm, g.config(nil, io.Discard, io.Discard))
			require.NoError(b, err)
			d, err := cpython.Attach(m)
			require.NoError(b, err)
			require.NoError(b, d.Init(ctx, []byte(cpython.DriverPython)))
			m.Close(ctx)
		}
	})
	b.Run("start-print", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			m, err := g.rt.InstantiateModule(ctx, g.cm, g.config(nil, io.Discard, io.Discard, "_start", "-c", "print(1)"))
			require.NoError(b, err)
			m.Close(ctx)
		}
	})
}

// BenchmarkPreinitIdleMemory keeps 32 idle instances made from the image
// and reports, per instance, the Go heap they hold and the growth of the
// process's resident memory, for the slice and copy-on-write memories, with
// the image's size, its non-zero pages and the pages that differ from a
// fresh instance (4 KiB each).
func BenchmarkPreinitIdleMemory(b *testing.B) {
	g, img := benchImage(b)
	nz := freshNonZero(b, g)
	f := cowFile(b, img)
	const n = 32
	for _, mode := range []string{"diff", "cow"} {
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				alloc := reserving(uint64(img.size))
				if mode == "cow" {
					alloc = cowAlloc(b, f)
				}
				ctx := experimental.WithMemoryAllocator(context.Background(), alloc)
				heap0, rss0 := memNow()
				mods := make([]api.Module, n)
				for j := range mods {
					m, err := g.rt.InstantiateModule(ctx, g.cm, g.config(nil, io.Discard, io.Discard))
					require.NoError(b, err)
					if mode == "cow" {
						require.NoError(b, img.restoreCow(m, nz))
					} else {
						require.NoError(b, img.restore(m, true))
					}
					d, err := cpython.Attach(m)
					require.NoError(b, err)
					_, err = d.Exec(ctx, []byte(`{"code": "x += 1"}`), 100)
					require.NoError(b, err)
					mods[j] = m
				}
				heap1, rss1 := memNow()
				b.ReportMetric(float64(heap1-heap0)/n/(1<<20), "heap-MiB/inst")
				b.ReportMetric(float64(rss1-rss0)/n/(1<<20), "rss-MiB/inst")
				for _, m := range mods {
					m.Close(ctx)
				}
			}
		})
	}
	b.ReportMetric(float64(img.size)/(1<<20), "image-MiB")
	b.ReportMetric(float64(img.nonZeroPages()*imagePage)/(1<<20), "nonzero-MiB")
	b.ReportMetric(float64(len(img.diff)*imagePage)/(1<<20), "diff-MiB")
}

// memNow returns the Go heap in use after a collection and the process's
// resident set, in bytes.
func memNow() (heap, rss int64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, _ := os.ReadFile("/proc/self/statm")
	fields := strings.Fields(string(b))
	if len(fields) > 1 {
		pages, _ := strconv.ParseInt(fields[1], 10, 64)
		rss = pages * int64(os.Getpagesize())
	}
	return int64(ms.HeapInuse), rss
}

// BenchmarkPreinitCheckpoint is what a session pays today after each run
// to keep its checkpoint: comparing the memory with the previous
// checkpoint, 4 KiB at a time, after a run of x += 1, and copying the
// pages that changed (reported as changed-pages).
func BenchmarkPreinitCheckpoint(b *testing.B) {
	g, img := benchImage(b)
	ctx := experimental.WithMemoryAllocator(context.Background(), reserving(uint64(img.size)))
	m, err := g.rt.InstantiateModule(ctx, g.cm, g.config(nil, io.Discard, io.Discard))
	require.NoError(b, err)
	defer m.Close(ctx)
	require.NoError(b, img.restore(m, true))
	d, err := cpython.Attach(m)
	require.NoError(b, err)
	check := bytes.Clone(img.mem)
	req := []byte(`{"code": "x += 1"}`)
	changed := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if _, err := d.Exec(ctx, req, 100); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		mem, _ := m.Memory().Read(0, m.Memory().Size())
		if len(mem) > len(check) {
			check = append(check, make([]byte, len(mem)-len(check))...)
		}
		changed = 0
		for p := 0; p+imagePage <= len(mem); p += imagePage {
			if !bytes.Equal(mem[p:p+imagePage], check[p:p+imagePage]) {
				copy(check[p:p+imagePage], mem[p:p+imagePage])
				changed++
			}
		}
	}
	b.ReportMetric(float64(changed), "changed-pages")
	b.ReportMetric(float64(len(check))/(1<<20), "memory-MiB")
}
