package main

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// hugeHeapBytes is how much of the Go heap hugeHeap asks huge pages for:
// more than a run of the command line has live at its peak (about 60 MB,
// most of it the guest module as wazero decodes it and the session's
// images), so all of it lands there.
const hugeHeapBytes = 256 << 20

// hugeHeap asks the kernel to back the first hugeHeapBytes of the Go heap
// with transparent huge pages, where the kernel does so only when asked
// (transparent_hugepage/enabled is "madvise", the common default). It
// reports whether it asked.
//
// A command-line run touches tens of megabytes of fresh memory, most of
// it once: the guest module wazero decodes, the base image and the
// snapshot it decodes, the guest's memory. Each 4 KiB page of it costs a
// page fault, and on virtual machines whose page tables the hypervisor
// shadows a fault costs about 10 µs, against 0.1-0.3 µs on bare metal:
// there a resume in a new process spent 190 ms of its 320 in faults. A
// 2 MiB huge page takes one fault for 512 of those.
//
// The Go runtime does not ask for huge pages itself (Go 1.21.1 stopped,
// because a long-lived process whose heap shrinks can keep whole huge
// pages for a few live bytes, and khugepaged can refill what the
// scavenger returned). That is why only the commands whose process lives
// for one run or one session call this, never the MCP server; and
// GODEBUG=disablethp=1, the runtime's own switch, turns it off, as do
// the limits roomForBlock respects.
//
// It grows the heap by one block of hugeHeapBytes, which the runtime maps
// but does not touch, marks the block, and frees it: the runtime places
// later allocations at the lowest free addresses, that is in the block
// (the lower ones left, those before it, are a few small spans).
// The mark stays on the mapping when the runtime gives pages back
// (MADV_DONTNEED keeps it).
func hugeHeap() bool {
	if strings.Contains(os.Getenv("GODEBUG"), "disablethp=1") || !roomForBlock() {
		return false
	}
	huge := hugePageSize()
	if huge == 0 {
		return false
	}
	b := make([]byte, hugeHeapBytes)
	// The block's ends are rounded out to whole huge pages: the runtime
	// places the next allocations from the block's start, and maps its
	// heap in 4 MiB chunks, so the rounded range is heap it has mapped.
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	beg := p &^ (huge - 1)
	end := (p + hugeHeapBytes + huge - 1) &^ (huge - 1)
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, beg, end-beg, syscall.MADV_HUGEPAGE)
	runtime.KeepAlive(b)
	b = nil
	runtime.GC()
	return errno == 0
}

// roomForBlock reports whether the block may be taken: not where the
// address space is limited (RLIMIT_AS, which it could push a run past) or
// the Go runtime has a memory limit (GOMEMLIMIT, which counts the freed
// block until the scavenger returns it).
func roomForBlock() bool {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &rl); err != nil || rl.Cur != ^uint64(0) {
		return false
	}
	return debug.SetMemoryLimit(-1) == math.MaxInt64
}

// hugePageSize is the size of a transparent huge page, or 0 if the kernel
// has none or never uses them.
func hugePageSize() uintptr {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		return 0
	}
	size, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(size)), 10, 64)
	if err != nil || n == 0 || n&(n-1) != 0 || n > hugeHeapBytes/4 {
		return 0
	}
	return uintptr(n)
}
