package cpython

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/fumehood/fumehood/internal/asyncify"
	"github.com/fumehood/fumehood/internal/guests/npm"
	"github.com/fumehood/fumehood/internal/pipeline"
)

// The session build of the built guest is made as the npm guest's is
// (npm.SessionSteps): the prepared interpreter, then Binaryen's asyncify
// and the export of every mutable global, each step cached
// content-addressed in the same store. A record beside the manifest names
// the result, so that loading it needs no wasm-opt.

// SessionCommand is the command that prepares the session build.
const SessionCommand = BuildCommand + " --session"

// ErrSessionNotPrepared reports that the session build of the built guest
// is not in the cache. It also matches npm.ErrGuestNotInstalled, so that
// callers that install what is missing on that error prepare it; its
// message names SessionCommand.
var ErrSessionNotPrepared error = sessionNotPrepared{}

type sessionNotPrepared struct{}

func (sessionNotPrepared) Error() string {
	return "cpython: the session build of the CPython " + PythonVersion + " guest is not prepared: run `" +
		SessionCommand + "` (it needs Binaryen's wasm-opt)"
}

func (sessionNotPrepared) Is(target error) bool { return target == npm.ErrGuestNotInstalled }

// Session describes the session build of the built guest.
type Session struct {
	// SHA256 is the session build's digest.
	SHA256 string `json:"sha256"`
	// Steps are the steps applied to the built interpreter, as name@version.
	Steps []string `json:"steps"`
	// Size is its size in bytes.
	Size int64 `json:"size"`
}

// sessionRecord names the record of the session build of the current key.
func (d dirs) sessionRecord() string {
	return strings.TrimSuffix(d.manifest, ".json") + ".session.json"
}

// LoadSession returns the session build of the built guest and the build's
// Info. It reads the record PrepareSession left, needing no wasm-opt; with
// no record, it looks the build up by the steps of the wasm-opt installed.
// It returns an error matching ErrNotBuilt when the guest is not built and
// ErrSessionNotPrepared when its session build is not prepared.
func LoadSession(ctx context.Context, opts *Options) ([]byte, Info, Session, error) {
	info, d, err := loadInfo(opts)
	if err != nil {
		return nil, Info{}, Session{}, err
	}
	if b, s, err := loadRecordedSession(d); err == nil {
		return b, info, s, nil
	}
	steps, err := npm.SessionSteps(ctx)
	if err != nil {
		return nil, Info{}, Session{}, fmt.Errorf("%w: %w", ErrSessionNotPrepared, err)
	}
	dg, ok := d.store.Lookup(info.WasmSHA256, steps)
	if !ok {
		return nil, Info{}, Session{}, ErrSessionNotPrepared
	}
	b, err := d.store.Get(dg)
	if err != nil {
		return nil, Info{}, Session{}, fmt.Errorf("%w: %w", ErrSessionNotPrepared, err)
	}
	s := Session{SHA256: dg, Steps: stepIDs(steps), Size: int64(len(b))}
	recordSession(d, s)
	return b, info, s, nil
}

// PrepareSession prepares the session build of the built guest (about two
// minutes and 1 GiB of memory, once) and stores it in the cache. The guest
// must be built: else the error matches ErrNotBuilt.
func PrepareSession(ctx context.Context, opts *Options) (Session, error) {
	if opts == nil {
		opts = &Options{}
	}
	info, d, err := loadInfo(opts)
	if err != nil {
		return Session{}, err
	}
	steps, err := npm.SessionSteps(ctx)
	if err != nil {
		return Session{}, fmt.Errorf("cpython: session build: %w", err)
	}
	dg, err := d.store.Run(ctx, info.WasmSHA256, steps, func(s pipeline.Step, i, n int) {
		opts.progress(npm.Progress{Stage: "prepare", Step: s.ID(), Done: int64(i), Total: int64(n)})
	})
	if err != nil {
		return Session{}, fmt.Errorf("cpython: session build: %w", err)
	}
	b, err := d.store.Get(dg)
	if err != nil {
		return Session{}, fmt.Errorf("cpython: session build: %w", err)
	}
	s := Session{SHA256: dg, Steps: stepIDs(steps), Size: int64(len(b))}
	recordSession(d, s)
	return s, nil
}

// EnsureSession loads the session build, preparing it first if the guest
// is built but its session build is not prepared.
func EnsureSession(ctx context.Context, opts *Options) ([]byte, Info, Session, error) {
	b, info, s, err := LoadSession(ctx, opts)
	if !errors.Is(err, ErrSessionNotPrepared) || errors.Is(err, asyncify.ErrNoWasmOpt) {
		return b, info, s, err
	}
	if _, err := PrepareSession(ctx, opts); err != nil {
		return nil, Info{}, Session{}, err
	}
	return LoadSession(ctx, opts)
}

// recordSession remembers s as the session build of the current key. A
// failure costs only a look-up with wasm-opt at the next load.
func recordSession(d dirs, s Session) {
	if data, err := json.Marshal(s); err == nil {
		_ = writeAtomic(d.sessionRecord(), data)
	}
}

// loadRecordedSession loads the recorded session build if it follows the
// current one-shot steps and its blob is intact.
func loadRecordedSession(d dirs) ([]byte, Session, error) {
	data, err := os.ReadFile(d.sessionRecord())
	if err != nil {
		return nil, Session{}, err
	}
	var s Session
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, Session{}, err
	}
	if len(s.Steps) != len(npm.Steps)+2 {
		return nil, Session{}, errors.New("cpython: recorded session build follows other steps")
	}
	for i, st := range npm.Steps {
		if s.Steps[i] != st.ID() {
			return nil, Session{}, errors.New("cpython: recorded session build follows other steps")
		}
	}
	b, err := d.store.Get(s.SHA256) // checked (once per file identity): a damaged blob is refused
	if err != nil {
		return nil, Session{}, err
	}
	s.Size = int64(len(b))
	return b, s, nil
}

func stepIDs(steps []pipeline.Step) []string {
	ids := make([]string, len(steps))
	for i, s := range steps {
		ids[i] = s.ID()
	}
	return ids
}
