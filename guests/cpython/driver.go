package cpython

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"os"
	"strings"
)

// The build links fumehood's driver (cdriver/fhdriver.c) into python.wasm: it
// exports fumehood_alloc, fumehood_free, fumehood_init and fumehood_exec
// beside _start (see the file's comment and preinit.go). The hook is
// three lines of steps.go: the step below, run between CPython's configure
// and make; LINKCC (driverLinkCC), which puts the driver's object on the
// command that links python.wasm; and the source's digest among the flags
// (driverFlag), so that a changed driver is a new build.

//go:embed cdriver/fhdriver.c
var driverSource []byte

// driverObject is where the driver's object goes, w standing for the work
// directory.
func driverObject(w string) string { return w + "/fhdriver/fhdriver.o" }

// driverLinkCC is CPython's LINKCC (its configure default, $(PURIFY)
// $(CC)) with the driver's object first: an object named on the command
// line is always linked, and its export_name attributes export its
// functions.
func driverLinkCC(w string) string { return "LINKCC=$(PURIFY) $(CC) " + driverObject(w) }

// driverFlag names the driver's source by digest in the build's flags.
func driverFlag() string {
	sum := sha256.Sum256(driverSource)
	return "driver: fhdriver.c sha256 " + hex.EncodeToString(sum[:])
}

// driver compiles fhdriver.c with the cross build's compiler, flags and
// headers (pyconfig.h is configure's output).
func (b *builder) driver(ctx context.Context) error {
	dir := b.path("fhdriver")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(b.path("fhdriver", "fhdriver.c"), driverSource, 0o644); err != nil {
		return err
	}
	cc := strings.Fields(b.cc())
	args := append(cc[1:], "-DNDEBUG")
	args = append(args, strings.Fields(b.depFlags())...)
	args = append(args, "-std=c11", "-fvisibility=hidden", "-Werror=implicit-function-declaration",
		"-I"+b.path("cross"), "-I"+b.path(pySrc, "Include"), "-I"+b.path(pySrc, "Include", "internal"),
		"-c", "fhdriver.c", "-o", driverObject(b.w))
	return b.run(ctx, dir, nil, cc[0], args...)
}
