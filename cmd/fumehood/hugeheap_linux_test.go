package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hugeHeapChild runs in a fresh process (TestMain): it calls hugeHeap,
// then allocates and writes 32 MiB as a run's heap would, and prints
// whether it asked and the kernel's smaps fields of the mapping that holds
// the allocation.
func hugeHeapChild() {
	if v := os.Getenv("FUMEHOOD_TEST_RLIMIT_AS"); v != "" {
		n, _ := strconv.ParseUint(v, 10, 64)
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			fmt.Println("error", err)
			return
		}
	}
	asked := hugeHeap()
	b := make([]byte, 32<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	fmt.Printf("asked %v\n", asked)
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		fmt.Println("error", err)
		return
	}
	defer f.Close()
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if lo, hi, ok := vmaRange(line); ok {
			in = lo <= addr && addr < hi
			continue
		}
		if in && (strings.HasPrefix(line, "THPeligible:") || strings.HasPrefix(line, "AnonHugePages:")) {
			fmt.Println(strings.Join(strings.Fields(line), " "))
		}
	}
	runtime.KeepAlive(b)
}

// vmaRange parses the range of an smaps header line ("lo-hi perms ...").
func vmaRange(line string) (lo, hi uint64, ok bool) {
	r, _, found := strings.Cut(line, " ")
	l, h, dash := strings.Cut(r, "-")
	if !found || !dash {
		return 0, 0, false
	}
	lo, err1 := strconv.ParseUint(l, 16, 64)
	hi, err2 := strconv.ParseUint(h, 16, 64)
	return lo, hi, err1 == nil && err2 == nil
}

// hugeHeapIn runs hugeHeapChild in a new process with env added.
func hugeHeapIn(t *testing.T, env ...string) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), "FUMEHOOD_TEST_HUGEHEAP=1"), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return string(out)
}

func TestHugeHeap(t *testing.T) {
	if hugePageSize() == 0 {
		t.Skip("the kernel has no transparent huge pages to ask for")
	}
	out := hugeHeapIn(t)
	t.Log(out)
	assert.Contains(t, out, "asked true")
	// The run's allocation lies in the block hugeHeap marked: the kernel
	// may back it with huge pages. Without the mark, under the usual
	// "madvise" mode, it may not.
	assert.Contains(t, out, "THPeligible: 1")

	for _, env := range []string{"GODEBUG=disablethp=1", "GOMEMLIMIT=1GiB", "FUMEHOOD_TEST_RLIMIT_AS=" + strconv.Itoa(8<<30)} {
		out = hugeHeapIn(t, env)
		assert.Contains(t, out, "asked false", env)
		if mode, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); strings.Contains(string(mode), "[madvise]") {
			assert.Contains(t, out, "THPeligible: 0", env)
		}
	}
}

func TestHugePageSize(t *testing.T) {
	size := hugePageSize()
	if size == 0 {
		t.Skip("no transparent huge pages")
	}
	assert.Zero(t, size&(size-1), "a power of two")
	assert.GreaterOrEqual(t, size, uintptr(os.Getpagesize()))
}
