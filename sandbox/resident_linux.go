package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// /proc/self/pagemap has one 64-bit entry per page of the process: bit 63
// is set when the page is in memory, bit 62 when it is swapped out (or
// being migrated). A page of private anonymous memory, which every linear
// memory is, with neither bit set has never been written since it was
// allocated or given back: it reads as zeros, and reading it makes the
// kernel allocate it (on some machines a fresh page for every page read,
// not the shared zero page). Its PAGEMAP_SCAN ioctl (Linux 6.7) reports
// the same as runs of pages, which costs the kernel a quarter of writing
// an entry per page. See the kernel's
// Documentation/admin-guide/mm/pagemap.rst.
const (
	pagemapPresent = 1 << 63
	pagemapSwapped = 1 << 62

	pageIsWritten = 1 << 1 // PAGEMAP_SCAN's categories
	pageIsPresent = 1 << 3
	pageIsSwapped = 1 << 4
)

// pmScanArg is the kernel's struct pm_scan_arg.
type pmScanArg struct {
	size, flags, start, end, walkEnd, vec, vecLen, maxPages   uint64
	categoryInverted, categoryMask, categoryAnyof, returnMask uint64
}

// pageRegion is the kernel's struct page_region: a run of pages.
type pageRegion struct{ start, end, categories uint64 }

// pagemap is the process's /proc/self/pagemap, opened once and kept: the
// write tracker (written_linux_amd64.go) scans through it too.
var pagemap = sync.OnceValue(func() *os.File {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil
	}
	return f
})

// noScan is set once PAGEMAP_SCAN turned out not to be there (a kernel
// before 6.7): unpopulated reads the entries from then on.
var noScan atomic.Bool

// unpopulated sets dst[i], for each page i of b, when the kernel holds no
// page there (so it reads as zeros), and returns dst, or nil when it
// cannot tell: no pagemap, b not starting on a page, pages of another size.
// Its system calls are made without the scheduler's bookkeeping
// (RawSyscall6): they do not block, and a checkpoint that a run waits for
// would otherwise hand its thread off and wake another.
func unpopulated(b []byte, dst []bool) []bool {
	f := pagemap()
	n := len(b) / pageSize
	if f == nil || n == 0 || os.Getpagesize() != pageSize {
		return nil
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if start%pageSize != 0 {
		return nil
	}
	if cap(dst) < n {
		dst = make([]bool, n)
	}
	dst = dst[:n]
	if !noScan.Load() {
		err := scanUnpopulated(f.Fd(), start, dst)
		if err == nil {
			return dst
		}
		if errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.EINVAL) {
			noScan.Store(true)
		}
	}
	if !readUnpopulated(f.Fd(), start, dst) {
		return nil
	}
	return dst
}

// scanUnpopulated is unpopulated through PAGEMAP_SCAN, for the len(dst)
// pages from start.
func scanUnpopulated(fd, start uintptr, dst []bool) error {
	clear(dst)
	lo := uint64(start)
	// Neither present nor swapped.
	q := pmScanArg{categoryInverted: pageIsPresent | pageIsSwapped, categoryMask: pageIsPresent | pageIsSwapped, returnMask: pageIsPresent}
	return scanPagemap(fd, q, lo, lo+uint64(len(dst))*pageSize, func(from, to uint64) {
		for i := (from - lo) / pageSize; i < (to-lo)/pageSize; i++ {
			dst[i] = true
		}
	})
}

// scanPagemap calls each with every run of pages [from, to) of [start,
// end), which must be whole pages, that PAGEMAP_SCAN reports for the
// query q (its flags and categories; scanPagemap sets the rest), in
// order. A run the kernel reports outside what it walked, or not on pages,
// is an error, as is a kernel without the ioctl (ENOTTY or EINVAL).
func scanPagemap(fd uintptr, q pmScanArg, start, end uint64, each func(from, to uint64)) error {
	if pagemapScan == 0 {
		return fmt.Errorf("PAGEMAP_SCAN: %w", syscall.ENOTTY)
	}
	var vec [64]pageRegion
	for at := start; at < end; {
		arg := q
		arg.size, arg.start, arg.end = uint64(unsafe.Sizeof(pmScanArg{})), at, end
		arg.vec, arg.vecLen = uint64(uintptr(unsafe.Pointer(&vec[0]))), uint64(len(vec))
		n, _, errno := syscall.RawSyscall6(syscall.SYS_IOCTL, fd, pagemapScan, uintptr(unsafe.Pointer(&arg)), 0, 0, 0)
		if errno == syscall.EINTR || errno == syscall.EAGAIN {
			continue
		}
		if errno != 0 {
			return fmt.Errorf("PAGEMAP_SCAN: %w", errno)
		}
		if n > uintptr(len(vec)) || arg.walkEnd <= at || arg.walkEnd > end {
			return fmt.Errorf("PAGEMAP_SCAN: %d regions, walked to %#x of [%#x, %#x)", n, arg.walkEnd, at, end)
		}
		for _, r := range vec[:n] {
			if r.start < at || r.end > arg.walkEnd || r.start >= r.end || (r.start-start)%pageSize != 0 || (r.end-start)%pageSize != 0 {
				return fmt.Errorf("PAGEMAP_SCAN: region [%#x, %#x) outside [%#x, %#x)", r.start, r.end, at, arg.walkEnd)
			}
			each(r.start, r.end)
		}
		at = arg.walkEnd
	}
	return nil
}

// readUnpopulated is unpopulated from pagemap's entries, read in one
// pread, for the len(dst) pages from start.
func readUnpopulated(fd, start uintptr, dst []bool) bool {
	n := len(dst)
	bp := entries.Get().(*[]byte)
	defer entries.Put(bp)
	if cap(*bp) < n*8 {
		*bp = make([]byte, n*8)
	}
	buf := (*bp)[:n*8]
	for got := 0; got < len(buf); {
		r, _, errno := syscall.RawSyscall6(syscall.SYS_PREAD64, fd, uintptr(unsafe.Pointer(&buf[got])),
			uintptr(len(buf)-got), (start/pageSize)*8+uintptr(got), 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 || r == 0 || r%8 != 0 {
			return false
		}
		got += int(r)
	}
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint64(buf[i*8:])&(pagemapPresent|pagemapSwapped) == 0
	}
	return true
}

// entries holds readUnpopulated's buffers: 8 bytes a page, 56 KiB for a
// session's memory.
var entries = sync.Pool{New: func() any { return new([]byte) }}

// minTrimPages is the shortest run of zero pages trimZeros gives back: a
// call and the TLB shootdown that follows cost more than a page or two.
const minTrimPages = 8

// trimZeros gives back to the kernel the runs of at least minTrimPages
// pages of b that hold only zeros (those marked in zero, known to be
// unpopulated, are not read), so a memory that was written all over with
// zeros (a pooled one) stops holding them. They read as zeros after, as
// before. It returns how many pages it gave back.
func trimZeros(b []byte, zero []bool) int {
	n, trimmed := len(b)/pageSize, 0
	if n == 0 || os.Getpagesize() != pageSize || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%pageSize != 0 {
		return 0
	}
	run := -1
	flush := func(end int) {
		if run >= 0 && end-run >= minTrimPages &&
			syscall.Madvise(b[run*pageSize:end*pageSize], syscall.MADV_DONTNEED) == nil {
			trimmed += end - run
		}
		run = -1
	}
	for i := range n {
		if (i >= len(zero) || !zero[i]) && !bytes.Equal(b[i*pageSize:(i+1)*pageSize], zeroPage) {
			flush(i)
			continue
		}
		if run < 0 {
			run = i
		}
	}
	flush(n)
	return trimmed
}
