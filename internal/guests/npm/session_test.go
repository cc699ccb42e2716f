package npm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fumehood/fumehood/internal/asyncify"
	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

func needWasmOpt(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(asyncify.Command); err != nil {
		t.Skip("wasm-opt is not installed (Debian package binaryen)")
	}
}

func TestSessionStepsFollowSteps(t *testing.T) {
	needWasmOpt(t)
	steps, err := SessionSteps(context.Background())
	require.NoError(t, err)
	require.Len(t, steps, len(Steps)+2)
	for i, s := range Steps {
		assert.Equal(t, s.ID(), steps[i].ID())
	}
	v, err := asyncify.Version(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "asyncify+wasm-opt-"+v+"@1", steps[len(Steps)].ID())
	assert.Equal(t, "export-globals@1", steps[len(Steps)+1].ID())

	old := Steps
	t.Cleanup(func() { Steps = old })
	Steps = append([]pipeline.Step{{Name: "extra", Version: 7}}, old...)
	steps, err = SessionSteps(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "extra@7", steps[0].ID())
}

func TestSessionNotInstalled(t *testing.T) {
	ctx := context.Background()
	opts := &Options{CacheDir: t.TempDir()}
	_, _, err := LoadSession(ctx, opts)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrSessionNotInstalled)
	assert.ErrorIs(t, err, ErrGuestNotInstalled)
	assert.Contains(t, err.Error(), "fumehood guest install --session")
	assert.False(t, errors.Is(ErrGuestNotInstalled, ErrSessionNotInstalled))

	// Without wasm-opt the session build can be neither found nor made.
	t.Setenv("PATH", t.TempDir())
	_, _, err = LoadSession(ctx, opts)
	assert.ErrorIs(t, err, ErrSessionNotInstalled)
	assert.ErrorIs(t, err, asyncify.ErrNoWasmOpt)
	_, _, err = EnsureSession(ctx, opts)
	assert.ErrorIs(t, err, asyncify.ErrNoWasmOpt)
	_, err = InstallSession(ctx, opts)
	assert.ErrorIs(t, err, asyncify.ErrNoWasmOpt)
}

func TestInstallSessionFake(t *testing.T) {
	needWasmOpt(t)
	wasm := fakeWasm()
	tgz := tarball(t, tarballEntry, wasm)
	useSource(t, tgz, wasm)
	path := filepath.Join(t.TempDir(), "pkg.tgz")
	require.NoError(t, os.WriteFile(path, tgz, 0o644))
	cache := t.TempDir()
	ctx := context.Background()
	var stages []string
	opts := &Options{CacheDir: cache, Tarball: path, Progress: func(p Progress) {
		if p.Stage == "prepare" {
			stages = append(stages, p.Step)
		}
	}}
	b, build, err := EnsureSession(ctx, opts)
	require.NoError(t, err)
	steps, err := SessionSteps(ctx)
	require.NoError(t, err)
	assert.Len(t, build.Steps, len(steps))
	assert.Equal(t, pipeline.Digest(b), build.SHA256)
	// The one-shot build is installed too, and is a different binary.
	_, oneShot, err := Load(ctx, &Options{CacheDir: cache})
	require.NoError(t, err)
	assert.NotEqual(t, oneShot.SHA256, build.SHA256)
	assert.Equal(t, append(slices.Clone(oneShot.Steps), steps[len(Steps)].ID(), steps[len(Steps)+1].ID()), stages)

	// The fuel global was exported already and keeps its name.
	m, err := wasmbin.Parse(b)
	require.NoError(t, err)
	g, err := wasmbin.MutableGlobals(m)
	require.NoError(t, err)
	var names []string
	for _, x := range g {
		names = append(names, x.Export)
	}
	assert.Contains(t, names, fuel.GlobalName)

	// Loading again runs nothing.
	stages = nil
	_, again, err := EnsureSession(ctx, opts)
	require.NoError(t, err)
	assert.Equal(t, build, again)
	assert.Empty(t, stages)

	// Once prepared, loading needs no wasm-opt: the build is recorded.
	t.Setenv("PATH", t.TempDir())
	_, again, err = LoadSession(ctx, &Options{CacheDir: cache})
	require.NoError(t, err)
	assert.Equal(t, build, again)
	// A record that does not follow the current steps is not used.
	rec := filepath.Join(cache, "guests", "session-build.json")
	data, err := os.ReadFile(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(rec, bytes.Replace(data, []byte(Steps[0].ID()), []byte("other@9"), 1), 0o644))
	_, _, err = LoadSession(ctx, &Options{CacheDir: cache})
	assert.ErrorIs(t, err, ErrSessionNotInstalled)
}

// driver reads frames "<length>\n<code>" from fd 0 and runs each in one
// persistent namespace, until end of input.
const driver = `import os
ns = {}
buf = b''
def need(cond):
    global buf
    while not cond():
        c = os.read(0, 65536)
        if not c:
            raise SystemExit(0)
        buf += c
while True:
    need(lambda: b'\n' in buf)
    n, _, buf = buf.partition(b'\n')
    n = int(n)
    need(lambda: len(buf) >= n)
    code, buf = buf[:n], buf[n:]
    exec(code, ns)
`

// session is the host side of one paused-or-running guest instance. Its
// Read is the guest's stdin: it hands over queued frames and, when none is
// queued, pauses the guest with asyncify instead of blocking.
type session struct {
	t        *testing.T
	mod      api.Module
	queue    []byte
	eof      bool
	buf      uint32 // address of the asyncify buffer, 0 until the first pause
	paused   bool   // an unwind was started and not yet stopped
	resuming bool   // a rewind was started and fd_read is not yet reached
	pauseAt  time.Time
	grow     time.Duration // time to grow memory for the buffer
}

const (
	asyncBufSize = 1024 // DESIGN.md: about 632 bytes are used
	pageSize     = 65536
)

func (s *session) call(name string, args ...uint64) {
	f := s.mod.ExportedFunction(name)
	require.NotNil(s.t, f, name)
	_, err := f.Call(context.Background(), args...)
	require.NoError(s.t, err, name)
}

func (s *session) Read(p []byte) (int, error) {
	if s.resuming {
		s.resuming = false
		s.call("asyncify_stop_rewind")
	}
	if len(s.queue) > 0 {
		n := copy(p, s.queue)
		s.queue = s.queue[n:]
		return n, nil
	}
	if s.eof {
		return 0, nil
	}
	// Pause: unwind the guest's stack into the buffer; fd_read returns,
	// then every caller up to _start returns.
	s.pauseAt = time.Now()
	mem := s.mod.Memory()
	if s.buf == 0 {
		t0 := time.Now()
		pages, ok := mem.Grow(1)
		require.True(s.t, ok, "grow memory for the asyncify buffer")
		s.buf = pages * pageSize
		s.grow = time.Since(t0)
	}
	require.True(s.t, mem.WriteUint32Le(s.buf, s.buf+8))
	require.True(s.t, mem.WriteUint32Le(s.buf+4, s.buf+asyncBufSize))
	s.call("asyncify_start_unwind", uint64(s.buf))
	s.paused = true
	return 0, nil
}

// start calls _start, which returns when the guest pauses; it then stops
// the unwind, leaving the instance idle.
func (s *session) start() {
	_, err := s.mod.ExportedFunction("_start").Call(context.Background())
	require.NoError(s.t, err, "_start")
	require.True(s.t, s.paused, "_start returned without pausing")
	s.call("asyncify_stop_unwind")
	s.paused = false
}

// resume rewinds the guest into the fd_read it paused in.
func (s *session) resume() {
	s.resuming = true
	s.call("asyncify_start_rewind", uint64(s.buf))
	s.start()
}

func frame(code string) []byte { return []byte(strconv.Itoa(len(code)) + "\n" + code) }

// TestSessionPauseResume is the proof that the session build pauses and
// resumes: frame 1 runs in one instance, which pauses waiting for input;
// its memory and mutable globals are copied into a new instance of the
// same compiled module, which resumes and runs frame 2 with frame 1's
// variables.
func TestSessionPauseResume(t *testing.T) {
	needWasmOpt(t)
	ctx := context.Background()
	if _, _, err := Load(ctx, nil); err != nil {
		t.Skipf("the Python guest is not installed: %v", err)
	}
	t0 := time.Now()
	_, built, err := LoadSession(ctx, nil)
	if errors.Is(err, ErrSessionNotInstalled) {
		_, built, err = EnsureSession(ctx, nil)
		t.Logf("prepared the session build in %v (asyncify is nearly all of it)", time.Since(t0).Round(time.Millisecond))
	}
	require.NoError(t, err)
	wasm, err := os.ReadFile(built.Path)
	require.NoError(t, err)
	_, oneShot, err := Load(ctx, nil)
	require.NoError(t, err)
	t.Logf("one-shot build %d bytes, session build %d bytes (%+.1f%%), steps %s",
		oneShot.Size, built.Size, 100*float64(built.Size-oneShot.Size)/float64(oneShot.Size), strings.Join(built.Steps, ", "))

	m, err := wasmbin.Parse(wasm)
	require.NoError(t, err)
	globals, err := wasmbin.MutableGlobals(m)
	require.NoError(t, err)
	for _, g := range globals {
		require.NotEmpty(t, g.Export, "global %d is not exported", g.Index)
	}
	t.Logf("mutable globals: %+v", globals)

	dir, err := CacheDir("")
	require.NoError(t, err)
	cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "wazero"))
	require.NoError(t, err)
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().
		WithDebugInfoEnabled(false).WithCompilationCache(cache))
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)

	t0 = time.Now()
	compiled, err := r.CompileModule(ctx, wasm)
	require.NoError(t, err)
	t.Logf("compile: %v (cold on the first run on a machine, else from the file cache)", time.Since(t0).Round(time.Millisecond))

	// The fumehood host module: out_of_fuel refills, anything else is a stub.
	hb := r.NewHostModuleBuilder(fuel.ImportModule)
	for _, f := range compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != fuel.ImportModule {
			continue
		}
		var fn api.GoModuleFunc = func(_ context.Context, m api.Module, stack []uint64) {
			clear(stack)
		}
		if name == fuel.ImportName {
			fn = func(_ context.Context, m api.Module, _ []uint64) {
				m.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal).Set(1 << 40)
			}
		}
		hb.NewFunctionBuilder().WithGoModuleFunction(fn, f.ParamTypes(), f.ResultTypes()).Export(name)
	}
	_, err = hb.Instantiate(ctx)
	require.NoError(t, err)

	newInstance := func(s *session, stdout, stderr *bytes.Buffer) {
		cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().
			WithArgs("python", "-u", "-c", driver).
			WithStdin(s).WithStdout(stdout).WithStderr(stderr)
		mod, err := r.InstantiateModule(ctx, compiled, cfg)
		require.NoError(t, err)
		s.mod = mod
	}

	// Instance A: start CPython, run frame 1, pause.
	var out1, err1 bytes.Buffer
	a := &session{t: t, queue: frame("x = 41\nprint('frame 1 ran')")}
	newInstance(a, &out1, &err1)
	defer a.mod.Close(ctx)
	t0 = time.Now()
	a.start()
	stopped := time.Now()
	t.Logf("start-up + frame 1 until paused: %v; pause (fd_read entered to stop_unwind done): %v, of which growing memory for the buffer %v",
		stopped.Sub(t0).Round(time.Millisecond), stopped.Sub(a.pauseAt).Round(time.Microsecond), a.grow.Round(time.Microsecond))
	assert.Equal(t, "frame 1 ran\n", out1.String(), "stderr: %s", err1.String())

	// The snapshot: linear memory and every exported mutable global.
	t0 = time.Now()
	view, ok := a.mod.Memory().Read(0, a.mod.Memory().Size())
	require.True(t, ok)
	image := bytes.Clone(view)
	values := map[string]uint64{}
	for _, g := range globals {
		values[g.Export] = a.mod.ExportedGlobal(g.Export).Get()
	}
	t.Logf("snapshot: memory %d bytes (%d pages), %d globals, copied in %v",
		len(image), len(image)/pageSize, len(values), time.Since(t0).Round(time.Microsecond))
	require.NoError(t, a.mod.Close(ctx))

	// Instance B: a fresh instance of the same compiled module, never
	// started, given A's memory and globals, then rewound.
	var out2, err2 bytes.Buffer
	b := &session{t: t, buf: a.buf, queue: frame("print(x + 1)")}
	t0 = time.Now()
	newInstance(b, &out2, &err2)
	defer b.mod.Close(ctx)
	tInst := time.Since(t0)
	t0 = time.Now()
	mem := b.mod.Memory()
	if need := uint32(len(image)) / pageSize; mem.Size()/pageSize < need {
		_, ok := mem.Grow(need - mem.Size()/pageSize)
		require.True(t, ok)
	}
	require.True(t, mem.Write(0, image))
	for name, v := range values {
		b.mod.ExportedGlobal(name).(api.MutableGlobal).Set(v)
	}
	tRestore := time.Since(t0)
	t0 = time.Now()
	b.resume()
	paused := time.Now()
	t.Logf("resume: instantiate %v, restore memory and globals %v, rewind + frame 2 + pause again %v (the pause: %v)",
		tInst.Round(time.Microsecond), tRestore.Round(time.Microsecond), paused.Sub(t0).Round(time.Microsecond), paused.Sub(b.pauseAt).Round(time.Microsecond))
	assert.Equal(t, "42\n", out2.String(), "stderr: %s", err2.String())

	// End of input ends the driver: _start returns without pausing.
	b.eof = true
	b.resuming = true
	b.call("asyncify_start_rewind", uint64(b.buf))
	_, err = b.mod.ExportedFunction("_start").Call(ctx)
	var exit interface{ ExitCode() uint32 }
	if err != nil {
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, uint32(0), exit.ExitCode())
	}
	assert.False(t, b.paused)
	t.Logf("memory after frame 2: %d bytes", b.mod.Memory().Size())
}
