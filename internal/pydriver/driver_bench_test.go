//go:build unix

package pydriver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/pydriver"
	"github.com/fumehood/fumehood/internal/wasmbin"
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
		data := 0
		for _, i := range benchImg.diff {
			if p := dataPages(b, g); int(i) < len(p) && p[i] {
				data++
			}
		}
		b.Logf("image: %d MiB of memory, %d non-zero pages, %d pages differ from a fresh instance, %d of them in the data segments (4 KiB pages)",
			benchImg.size>>20, benchImg.nonZeroPages(), len(benchImg.diff), data)
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

// restoreCow finishes a copy-on-write instance: wazero wrote the active
// data segments over the image at instantiation, so the image's pages they
// cover (dataPages) that differ from a fresh instance's are written again.
func (img *image) restoreCow(m api.Module, data []bool) error {
	buf, _ := m.Memory().Read(0, m.Memory().Size())
	for _, i := range img.diff {
		if int(i) < len(data) && data[i] {
			copy(buf[i*imagePage:(i+1)*imagePage], img.mem[i*imagePage:])
		}
	}
	for name, v := range img.globals {
		m.ExportedGlobal(name).(api.MutableGlobal).Set(v)
	}
	return nil
}

// dataPages lists which pages the module's active data segments cover
// (each at an i32.const offset, as wasm-ld writes them).
func dataPages(b *testing.B, g *preinitGuest) []bool {
	m, err := wasmbin.Parse(g.wasm)
	require.NoError(b, err)
	sec := m.Section(wasmbin.SectionData)
	require.NotNil(b, sec)
	p := sec.Payload
	next := func() uint32 {
		v, n, err := wasmbin.U32(p)
		require.NoError(b, err)
		p = p[n:]
		return v
	}
	var pages []bool
	for count := next(); count > 0; count-- {
		flags := next()
		require.Contains(b, []uint32{0, 1}, flags, "data segment kind")
		if flags == 1 { // passive
			p = p[next():]
			continue
		}
		require.Equal(b, byte(0x41), p[0], "i32.const offset")
		off, n, err := wasmbin.S32(p[1:])
		require.NoError(b, err)
		require.Equal(b, byte(0x0b), p[1+n])
		p = p[2+n:]
		size := next()
		p = p[size:]
		for i := uint32(off) / imagePage; i <= (uint32(off)+size)/imagePage; i++ {
			for len(pages) <= int(i) {
				pages = append(pages, false)
			}
			pages[i] = true
		}
	}
	return pages
}

var printReq = []byte(`{"code": "print(1)"}`)

// guardedExec runs a request with a fuel budget of 10^10 and a watchdog
// that poisons the fuel after 30 s, so that a runaway guest fails the
// benchmark rather than hangs it.
func guardedExec(b *testing.B, ctx context.Context, d *pydriver.Driver, m api.Module, req []byte) *pydriver.Outcome {
	budget := int64(10_000_000_000)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-stop:
		case <-time.After(30 * time.Second):
			m.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal).Set(1 << 63)
		}
	}()
	o, err := d.Exec(context.WithValue(ctx, budgetKey{}, &budget), req, 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	return o
}

// BenchmarkPreinitOneShot is a one-shot run from the image: a new
// instance, the image written into it, fumehood_exec of print(1), close.
// "diff" writes only the pages that differ from a fresh instance, "full"
// the whole memory, "cow" maps the image copy-on-write and rewrites only
// the data segments' pages.
func BenchmarkPreinitOneShot(b *testing.B) {
	g, img := benchImage(b)
	nz := dataPages(b, g)
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
				times := make([]time.Duration, 0, b.N)
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
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
						d, err := pydriver.Attach(m)
						require.NoError(b, err)
						o := guardedExec(b, ctx, d, m, printReq)
						if o.Exception != nil || out.String() != "1\n" {
							b.Fatalf("outcome %+v, stdout %q", o, out.String())
						}
					}
					m.Close(ctx)
					times = append(times, time.Since(t0))
				}
				reportMedian(b, times)
			})
		}
	}
	cow := 0
	for _, i := range img.diff {
		if int(i) < len(nz) && nz[i] {
			cow++
		}
	}
	b.ReportMetric(float64(len(img.diff)), "diff-pages")
	b.ReportMetric(float64(cow), "cow-pages")
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
			d, err := pydriver.Attach(m)
			require.NoError(b, err)
			req, _ := json.Marshal(pydriver.Request{Code: code})
			b.ReportAllocs()
			b.ResetTimer()
			times := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				guardedExec(b, ctx, d, m, req)
				times = append(times, time.Since(t0))
			}
			reportMedian(b, times)
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
			d, err := pydriver.Attach(m)
			require.NoError(b, err)
			require.NoError(b, d.Init(ctx, []byte(pydriver.DriverPython)))
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
	nz := dataPages(b, g)
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
					d, err := pydriver.Attach(m)
					require.NoError(b, err)
					guardedExec(b, ctx, d, m, []byte(`{"code": "x += 1"}`))
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

// reportMedian reports the median of the iterations' times: the mean
// (ns/op) of a few iterations on a loaded machine follows its outliers.
func reportMedian(b *testing.B, times []time.Duration) {
	slices.Sort(times)
	if len(times) > 0 {
		b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
	}
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
	d, err := pydriver.Attach(m)
	require.NoError(b, err)
	check := bytes.Clone(img.mem)
	req := []byte(`{"code": "x += 1"}`)
	changed := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		guardedExec(b, ctx, d, m, req)
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
