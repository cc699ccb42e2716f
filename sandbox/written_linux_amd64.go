package sandbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// The kernel's record of which pages a process wrote (Linux 6.7 and
// later): a range registered with a userfaultfd in asynchronous
// write-protect mode takes no fault to user space; the kernel itself lifts
// a page's protection at its first write, and the PAGEMAP_SCAN ioctl of
// /proc/self/pagemap reports the pages whose protection was lifted and
// protects them again, in one call. See the kernel's
// Documentation/admin-guide/mm/userfaultfd.rst and pagemap.rst.
const (
	sysUserfaultfd = 323 // amd64
	uffdAPI        = 0xAA

	uffdUserModeOnly = 1 // userfaultfd's flag: only faults from user mode (Linux 5.11)

	uffdFeatureWPUnpopulated = 1 << 13 // empty entries are protected too
	uffdFeatureWPAsync       = 1 << 15 // the kernel resolves write faults

	uffdioAPI            = 0xc018aa3f // _IOWR(0xAA, 0x3F, struct uffdio_api)
	uffdioRegister       = 0xc020aa00 // _IOWR(0xAA, 0x00, struct uffdio_register)
	uffdioUnregister     = 0x8010aa01 // _IOR(0xAA, 0x01, struct uffdio_range)
	uffdioWriteprotect   = 0xc018aa06 // _IOWR(0xAA, 0x06, struct uffdio_writeprotect)
	uffdRegisterModeWP   = 1 << 1
	uffdWriteprotectMode = 1 << 0

	pmScanWPMatching   = 1 << 0 // protect the pages reported again
	pmScanCheckWPAsync = 1 << 1 // fail unless the range is in async mode
)

type uffdioAPIArg struct{ api, features, ioctls uint64 }

type uffdioRange struct{ start, len uint64 }

type uffdioRegisterArg struct {
	rng          uffdioRange
	mode, ioctls uint64
}

type uffdioWriteprotectArg struct {
	rng  uffdioRange
	mode uint64
}

// writeTracker is the process's userfaultfd and /proc/self/pagemap, open
// for the life of the process once a session first needs them.
type writeTracker struct {
	uffd, pagemap int
}

// newWriteTracker opens the tracker, or reports why the kernel cannot
// track writes.
func newWriteTracker() (*writeTracker, error) {
	flags := uintptr(syscall.O_CLOEXEC | syscall.O_NONBLOCK)
	fd, _, errno := syscall.Syscall(sysUserfaultfd, flags, 0, 0)
	if errno == syscall.EPERM {
		// vm.unprivileged_userfaultfd=0 (Debian's default) refuses an
		// unprivileged process all but user-mode faults, which is all an
		// asynchronous write protection needs: the kernel resolves every
		// write fault itself, before that check.
		fd, _, errno = syscall.Syscall(sysUserfaultfd, flags|uffdUserModeOnly, 0, 0)
	}
	if errno != 0 {
		return nil, fmt.Errorf("userfaultfd: %w", errno)
	}
	api := uffdioAPIArg{api: uffdAPI, features: uffdFeatureWPAsync | uffdFeatureWPUnpopulated}
	if err := ioctl(int(fd), uffdioAPI, unsafe.Pointer(&api)); err != nil {
		syscall.Close(int(fd))
		return nil, fmt.Errorf("userfaultfd: asynchronous write protection: %w", err)
	}
	pm := pagemap() // the one unpopulated reads (resident_linux.go)
	if pm == nil {
		syscall.Close(int(fd))
		return nil, errors.New("/proc/self/pagemap cannot be opened")
	}
	return &writeTracker{uffd: int(fd), pagemap: int(pm.Fd())}, nil
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	for {
		_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		switch errno {
		case 0:
			return nil
		case syscall.EINTR, syscall.EAGAIN:
			continue
		}
		return errno
	}
}

// watched is a memory the tracker protects: its first byte's address and
// the length registered, whole pages.
type watched struct {
	start, len uint64
}

// watch registers b's capacity, which must start on a page, and protects
// it: from now on the pages written are reported by written.
func (t *writeTracker) watch(b []byte) (watched, error) {
	if cap(b) < pageSize {
		return watched{}, errors.New("the memory is smaller than a page")
	}
	start := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b[:1]))))
	w := watched{start: start, len: uint64(cap(b)) &^ (pageSize - 1)}
	if start%uint64(os.Getpagesize()) != 0 || pageSize%os.Getpagesize() != 0 {
		return watched{}, fmt.Errorf("the memory at %#x does not start on a page", start)
	}
	reg := uffdioRegisterArg{rng: uffdioRange{w.start, w.len}, mode: uffdRegisterModeWP}
	if err := ioctl(t.uffd, uffdioRegister, unsafe.Pointer(&reg)); err != nil {
		return watched{}, fmt.Errorf("userfaultfd register: %w", err)
	}
	wp := uffdioWriteprotectArg{rng: uffdioRange{w.start, w.len}, mode: uffdWriteprotectMode}
	if err := ioctl(t.uffd, uffdioWriteprotect, unsafe.Pointer(&wp)); err != nil {
		t.unwatch(w)
		return watched{}, fmt.Errorf("userfaultfd write-protect: %w", err)
	}
	return w, nil
}

// unwatch ends the tracking of w; the kernel lifts its protection.
func (t *writeTracker) unwatch(w watched) {
	r := uffdioRange{w.start, w.len}
	_ = ioctl(t.uffd, uffdioUnregister, unsafe.Pointer(&r))
}

// written appends to dst the indexes of w's pages written since the last
// call (or watch) and protects them again. A page written while the call
// runs is reported now or by the next call.
func (t *writeTracker) written(w watched, dst []uint32) ([]uint32, error) {
	q := pmScanArg{flags: pmScanWPMatching | pmScanCheckWPAsync, categoryMask: pageIsWritten, returnMask: pageIsWritten}
	err := scanPagemap(uintptr(t.pagemap), q, w.start, w.start+w.len, func(from, to uint64) {
		for p := from; p < to; p += pageSize {
			dst = append(dst, uint32((p-w.start)/pageSize))
		}
	})
	return dst, err
}
