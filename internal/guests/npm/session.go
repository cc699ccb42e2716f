package npm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fumehood/fumehood/internal/asyncify"
	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// The session build of the guest can be paused while it waits for input
// and resumed later, in the same instance or in a new one given the paused
// instance's memory and mutable globals. It is the one-shot build ([Steps])
// followed by Binaryen's asyncify, with only
// wasi_snapshot_preview1.fd_read as an asynchronous import, and by exporting
// every mutable global (under [GlobalExportPrefix] followed by its index),
// since a wazero host can read and write only exported globals. One-shot
// runs keep the build without asyncify, which runs 25-55% faster.
//
// Preparing it needs Binaryen's wasm-opt (Debian package "binaryen") and
// takes about a minute and a half and 1 GiB of memory, once per machine and
// wasm-opt version.

// SessionInstallCommand is the command that installs the session build.
const SessionInstallCommand = InstallCommand + " --session"

// GlobalExportPrefix starts the export name of each mutable global that the
// session build exports for the host, such as "fumehood_global_3". Globals
// the guest already exported (the fuel and errno globals) keep their names.
const GlobalExportPrefix = "fumehood_global_"

// ErrSessionNotInstalled reports that the session build is not in the cache.
// It also matches ErrGuestNotInstalled; its message names
// SessionInstallCommand.
var ErrSessionNotInstalled error = sessionNotInstalled{}

type sessionNotInstalled struct{}

func (sessionNotInstalled) Error() string {
	return "the session build of the Python guest is not installed: run `" + SessionInstallCommand +
		"` (or `go run github.com/fumehood/fumehood/cmd/fumehood guest install --session` from a module that requires fumehood); it needs Binaryen's wasm-opt"
}

func (sessionNotInstalled) Is(target error) bool { return target == ErrGuestNotInstalled }

// SessionSteps returns the preparation steps of the session build: the
// current [Steps], then "asyncify" and "export-globals". The asyncify step's
// name carries the version of the installed wasm-opt, as in
// "asyncify+wasm-opt-108@1", so that the cache key changes with the tool.
// Without wasm-opt it returns an error matching asyncify.ErrNoWasmOpt.
func SessionSteps(ctx context.Context) ([]pipeline.Step, error) {
	v, err := asyncify.Version(ctx)
	if err != nil {
		return nil, err
	}
	steps := make([]pipeline.Step, 0, len(Steps)+2)
	steps = append(steps, Steps...)
	return append(steps,
		pipeline.Step{Name: "asyncify+wasm-opt-" + v, Version: 1, Apply: asyncify.Asyncify},
		pipeline.Step{Name: "export-globals", Version: 1, Apply: exportGlobals},
	), nil
}

// exportGlobals exports every mutable global the guest defines.
func exportGlobals(_ context.Context, in []byte) ([]byte, error) {
	m, err := wasmbin.Parse(in)
	if err != nil {
		return nil, err
	}
	if _, err := wasmbin.ExportMutableGlobals(m, GlobalExportPrefix); err != nil {
		return nil, err
	}
	return m.Encode(), nil
}

// LoadSession returns the session build of the guest and its description,
// or an error matching ErrSessionNotInstalled (and so ErrGuestNotInstalled)
// when it is not in the cache.
//
// It loads the session build last prepared for the current one-shot steps,
// which it records, without running wasm-opt: a machine that only runs
// sessions needs no Binaryen once the cache is filled. With no record, it
// looks the build up by the steps of the wasm-opt installed, and without
// wasm-opt the error also matches asyncify.ErrNoWasmOpt.
func LoadSession(ctx context.Context, opts *Options) ([]byte, Build, error) {
	if opts == nil {
		opts = &Options{}
	}
	store, err := opts.store()
	if err != nil {
		return nil, Build{}, err
	}
	if b, build, err := loadRecorded(store); err == nil {
		return b, build, nil
	}
	steps, err := SessionSteps(ctx)
	if err != nil {
		return nil, Build{}, fmt.Errorf("python: %w: %w", ErrSessionNotInstalled, err)
	}
	b, build, err := loadSteps(store, steps, ErrSessionNotInstalled, SessionInstallCommand)
	if err == nil {
		record(store, build)
	}
	return b, build, err
}

// recordFile names the record of the session build last prepared.
func recordFile(store *pipeline.Store) string {
	return filepath.Join(store.Dir(), "session-build.json")
}

// record remembers build as the session build of the current steps. A
// failure costs only a wasm-opt run at the next load.
func record(store *pipeline.Store, build Build) {
	data, err := json.Marshal(build)
	if err != nil {
		return
	}
	tmp := recordFile(store) + ".tmp-" + strconv.Itoa(os.Getpid())
	if os.WriteFile(tmp, data, 0o644) == nil {
		os.Rename(tmp, recordFile(store))
	}
}

// loadRecorded loads the recorded session build if it follows the current
// one-shot steps and its blob is intact.
func loadRecorded(store *pipeline.Store) ([]byte, Build, error) {
	data, err := os.ReadFile(recordFile(store))
	if err != nil {
		return nil, Build{}, err
	}
	var build Build
	if err := json.Unmarshal(data, &build); err != nil {
		return nil, Build{}, err
	}
	if build.SourceSHA256 != source.sha256 || len(build.Steps) != len(Steps)+2 {
		return nil, Build{}, errors.New("python: recorded session build is of another guest")
	}
	for i, s := range Steps {
		if build.Steps[i] != s.ID() {
			return nil, Build{}, errors.New("python: recorded session build follows other steps")
		}
	}
	b, err := store.Get(build.SHA256) // checked (once per file identity): a damaged blob is refused
	if err != nil {
		return nil, Build{}, err
	}
	build.Path, build.Size = store.BlobPath(build.SHA256), int64(len(b))
	return b, build, nil
}

// InstallSession installs the guest as Install does, then prepares and
// stores its session build. It checks for wasm-opt before downloading
// anything.
func InstallSession(ctx context.Context, opts *Options) (Build, error) {
	if opts == nil {
		opts = &Options{}
	}
	steps, err := SessionSteps(ctx)
	if err != nil {
		return Build{}, fmt.Errorf("python: session build: %w", err)
	}
	if _, err := Install(ctx, opts); err != nil {
		return Build{}, err
	}
	store, err := opts.store()
	if err != nil {
		return Build{}, err
	}
	_, err = store.Run(ctx, source.sha256, steps, func(s pipeline.Step, i, n int) {
		opts.progress(Progress{Stage: "prepare", Step: s.ID(), Done: int64(i), Total: int64(n)})
	})
	if err != nil {
		return Build{}, err
	}
	_, build, err := loadSteps(store, steps, ErrSessionNotInstalled, SessionInstallCommand)
	if err == nil {
		record(store, build)
	}
	return build, err
}

// EnsureSession loads the session build, installing it first if it is not
// in the cache.
func EnsureSession(ctx context.Context, opts *Options) ([]byte, Build, error) {
	b, build, err := LoadSession(ctx, opts)
	if !errors.Is(err, ErrSessionNotInstalled) || errors.Is(err, asyncify.ErrNoWasmOpt) {
		return b, build, err
	}
	if _, err := InstallSession(ctx, opts); err != nil {
		return nil, Build{}, err
	}
	return LoadSession(ctx, opts)
}

// loadSteps walks the links from the source digest through steps and reads
// the final blob; notInstalled and install name the error and the command
// for a build that is not in the cache.
func loadSteps(store *pipeline.Store, steps []pipeline.Step, notInstalled error, install string) ([]byte, Build, error) {
	b, build, _, err := openSteps(store, steps, notInstalled, install, false)
	return b, build, err
}

// openSteps is loadSteps, with the blob mapped (Store.Open) if mapped is
// set, and then done to call once the bytes are no longer used; done is
// nil otherwise, or on an error.
func openSteps(store *pipeline.Store, steps []pipeline.Step, notInstalled error, install string, mapped bool) ([]byte, Build, func() error, error) {
	d, ok := store.Lookup(source.sha256, steps)
	if !ok {
		return nil, Build{}, nil, fmt.Errorf("python: %w (cache: %s)", notInstalled, store.Dir())
	}
	var (
		b    []byte
		done func() error
		err  error
	)
	if mapped {
		b, done, err = store.Open(d)
	} else {
		b, err = store.Get(d)
	}
	if err != nil {
		return nil, Build{}, nil, fmt.Errorf("python: prepared guest unreadable, reinstall with `%s`: %w", install, err)
	}
	ids := make([]string, len(steps))
	for i, s := range steps {
		ids[i] = s.ID()
	}
	return b, Build{
		Package: Package, Version: Version,
		SourceSHA256: source.sha256,
		SHA256:       d, Steps: ids, Path: store.BlobPath(d), Size: int64(len(b)),
	}, done, nil
}
