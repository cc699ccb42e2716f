package cpython

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// What the build adds to CPython for agent code (issue 18): a C stack big
// enough for CPython's C recursion limit, PBKDF2 and scrypt without
// OpenSSL, and the standard library's sources for tracebacks.

// StackSize is the guest's C stack in bytes (wasm-ld -z stack-size), placed
// first in linear memory (--stack-first, as CPython's configure does for
// WASI) so that an overflow traps at the bottom of memory instead of
// overwriting data.
//
// CPython 3.13 stops C recursion at Py_C_RECURSION_LIMIT levels, 5000 for
// WASI, and raises RecursionError. Measured on the build with the 8 MiB
// stack of CPython's configure (TestCStackAtRecursionLimit: the lowest
// stack pointer reached when the limit stops a recursion): through the
// evaluation loop (lru_cache, sum over a generator, map, a dunder method,
// re.sub, json's object_hook, pyexpat handlers) 0.75-1.5 MiB at the limit;
// sorted with a key that recurses 2.6 MiB; an SQLite function that runs
// a query calling itself 3.7 MiB; list.sort whose comparison
// recurses 5.0 MiB (its merge state is on the stack), 63% of 8 MiB. That
// leaves too little room for paths not measured; 16 MiB holds three times
// the worst found (31% of it on the 16 MiB build, the same bytes). The stack costs linear memory, which the run's memory
// limit counts (28 MiB at start instead of 20).
const StackSize = 16 << 20

// InitialMemory is the guest's initial linear memory: the stack, then
// static data (about 3.5 MiB) and the start of the heap, the same 12 MiB
// after the stack as CPython's configure gives (20 MiB with an 8 MiB
// stack).
const InitialMemory = StackSize + 12<<20

// stackLDFlags override configure's WASI link flags (make's
// LDFLAGS_NODIST comes after configure's on the link line; wasm-ld takes
// the last value of each).
func stackLDFlags() string {
	return "-z stack-size=" + strconv.Itoa(StackSize) + " -Wl,--stack-first -Wl,--initial-memory=" + strconv.Itoa(InitialMemory)
}

// kdfSource is the _fumehood_kdf module: PBKDF2-HMAC (sha1, sha224,
// sha256, sha384, sha512) and scrypt in plain C. CPython 3.13 takes
// hashlib.pbkdf2_hmac and hashlib.scrypt from _hashlib, its OpenSSL
// binding, only; the build has no OpenSSL (a TLS and crypto library of
// half a million lines for two functions), so the guest gets these two
// from a small module of the project's own, checked against OpenSSL's
// output (kdf/kdf_test.py) and in the guest (TestBuiltGuestBatteries).
//
//go:embed kdf/_fumehood_kdf.c
var kdfSource []byte

// kdfSetup builds _fumehood_kdf into the interpreter (Modules/Setup.local
// of the build directory; makesetup finds the source under the source
// tree's Modules).
const kdfSetup = "*static*\n_fumehood_kdf _fumehood_kdf.c\n"

// addKDF puts the module's source into the CPython tree and its line into
// the cross build's Setup.local, before configure.
func (b *builder) addKDF() error {
	if err := os.WriteFile(b.path(pySrc, "Modules", "_fumehood_kdf.c"), kdfSource, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(b.path("cross", "Modules"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(b.path("cross", "Modules", "Setup.local"), []byte(kdfSetup), 0o644)
}

// hashlibFallback is what hashlib.py does when _hashlib lacks pbkdf2_hmac
// or scrypt: take them from _fumehood_kdf.
var hashlibPatches = [][2]string{
	{
		"    from _hashlib import pbkdf2_hmac\n    __all__ += ('pbkdf2_hmac',)\nexcept ImportError:\n    pass\n",
		"    from _hashlib import pbkdf2_hmac\n    __all__ += ('pbkdf2_hmac',)\nexcept ImportError:\n    # fumehood: no OpenSSL in this build; its own C implementation.\n    from _fumehood_kdf import pbkdf2_hmac\n    __all__ += ('pbkdf2_hmac',)\n",
	},
	{
		"    from _hashlib import scrypt\nexcept ImportError:\n    pass\n",
		"    from _hashlib import scrypt\nexcept ImportError:\n    # fumehood: no OpenSSL in this build; its own C implementation.\n    from _fumehood_kdf import scrypt\n",
	},
}

// patchHashlib applies hashlibPatches to the copied Lib/hashlib.py; a
// patch that does not apply exactly once is an error.
func patchHashlib(lib string) error {
	p := filepath.Join(lib, "hashlib.py")
	src, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	for _, pt := range hashlibPatches {
		if n := bytes.Count(src, []byte(pt[0])); n != 1 {
			return fmt.Errorf("hashlib.py: the pbkdf2_hmac/scrypt import is found %d times, not once", n)
		}
		src = bytes.Replace(src, []byte(pt[0]), []byte(pt[1]), 1)
	}
	return os.WriteFile(p, src, 0o644)
}
