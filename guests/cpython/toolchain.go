package cpython

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// The cross toolchain is not installed on the machine: the build fetches
// its pinned packages (ToolchainInputs) like its other inputs, and unpacks
// them with dpkg-deb -x into its work directory (w/toolchain), so any user
// can build, and the guest does not depend on what the machine has
// installed. Debian's programs find their libraries in /usr/lib; here a
// wrapper for each program (w/toolchain/bin, first on the build's PATH)
// points LD_LIBRARY_PATH at the unpacked ones. clang finds its headers and
// wasm32 runtime next to itself (its resource directory), and wasm-ld-19
// on PATH: the wrapper.

// llvmDir is LLVM 19's tree in the unpacked packages.
const llvmDir = "usr/lib/llvm-19"

// toolchainPrograms are the programs the build runs, by the names of
// Debian's /usr/bin links, with the program in llvmDir/bin each one runs.
var toolchainPrograms = map[string]string{
	"clang-19":       "clang",
	"clang++-19":     "clang++",
	"wasm-ld-19":     "wasm-ld",
	"llvm-ar-19":     "llvm-ar",
	"llvm-ranlib-19": "llvm-ranlib",
	"llvm-strip-19":  "llvm-strip",
	"llvm-nm-19":     "llvm-nm",
	// The profile-guided build merges its raw profile (pgo.go).
	"llvm-profdata-19": "llvm-profdata",
}

// toolchainDir is where the toolchain is unpacked, p a path inside it.
func (b *builder) toolchainDir(p ...string) string {
	return b.path(append([]string{"toolchain"}, p...)...)
}

// toolchainBin holds the wrappers, first on the build's PATH.
func (b *builder) toolchainBin() string { return b.toolchainDir("bin") }

// unpackToolchain unpacks the toolchain's verified packages, writes the
// wrappers and records the compiler's version line, which running it
// also checks.
func (b *builder) unpackToolchain(ctx context.Context) error {
	dir := b.toolchainDir()
	for _, in := range b.toolchain {
		if err := b.run(ctx, b.w, nil, "dpkg-deb", "-x", b.files[in.Package], dir); err != nil {
			return err
		}
	}
	a := debianArch[runtime.GOARCH]
	libs := filepath.Join(dir, "usr", "lib", a.multiarch) + ":" + filepath.Join(dir, llvmDir, "lib")
	if err := os.MkdirAll(b.toolchainBin(), 0o755); err != nil {
		return err
	}
	for name, prog := range toolchainPrograms {
		real := filepath.Join(dir, llvmDir, "bin", prog)
		if _, err := os.Stat(real); err != nil {
			return fmt.Errorf("the toolchain's packages have no %s: %w", prog, err)
		}
		script := "#!/bin/sh\nLD_LIBRARY_PATH=" + shellQuote(libs) + "\nexport LD_LIBRARY_PATH\nexec " + shellQuote(real) + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(b.toolchainBin(), name), []byte(script), 0o755); err != nil {
			return err
		}
	}
	out, err := b.output(ctx, b.w, filepath.Join(b.toolchainBin(), "clang-19"), "--version")
	if err != nil {
		return fmt.Errorf("the fetched clang does not run on this machine: %w", err)
	}
	version, _, _ := strings.Cut(out, "\n")
	b.tcVersion = strings.TrimSpace(version)
	return nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
