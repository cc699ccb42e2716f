package sandbox

import "syscall"

// reserveMemory maps n bytes of address space for one linear memory, or
// returns nil. The kernel backs a page only once it is written, and
// MAP_NORESERVE keeps the mapping out of the commit charge (under the
// default overcommit policy): a memory reserved at its limit costs what
// its guest writes, and grows in place, without a copy or an old buffer
// left for the collector. Give it back with unreserveMemory.
func reserveMemory(n uint64) []byte {
	if n == 0 || n > maxReserve {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	return b
}

// unreserveMemory unmaps a memory reserveMemory returned (any slice of it
// from its start: all of its capacity is unmapped).
func unreserveMemory(b []byte) {
	_ = syscall.Munmap(b[:cap(b)])
}
