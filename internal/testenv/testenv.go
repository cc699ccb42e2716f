// Package testenv gives tests the guests they run: the installed Python
// guest, compiled once per test binary, and Go programs built for WASI at
// test time.
package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// TestGuestEnv is an alias of sandbox.GuestEnv ($FUMEHOOD_GUEST) for
// tests: when set, it chooses the Python guest of every test binary that
// imports testenv (and of the programs it starts), as
// `FUMEHOOD_TEST_GUEST=npm go test ./...`. Without either, tests run on the
// library's default: the built guest where it is built, else the npm guest.
const TestGuestEnv = "FUMEHOOD_TEST_GUEST"

func init() {
	if v := os.Getenv(TestGuestEnv); v != "" {
		os.Setenv(sandbox.GuestEnv, v)
	}
}

// Guest returns the Python guest the tests run on: sandbox.GuestBuilt or
// sandbox.GuestNPM.
func Guest(t testing.TB) string {
	t.Helper()
	kind, err := sandbox.ChooseGuest(nil)
	require.NoError(t, err)
	return kind
}

// RequireGuest skips the test unless the tests run on the Python guest
// kind (sandbox.GuestBuilt or sandbox.GuestNPM): for tests about one guest.
func RequireGuest(t testing.TB, kind string) {
	t.Helper()
	if got := Guest(t); got != kind {
		t.Skipf("about the %s guest; the tests run on the %s guest ($%s)", kind, got, sandbox.GuestEnv)
	}
}

var python struct {
	once  sync.Once
	guest *sandbox.Guest
	err   error
}

// Python returns the Python guest, compiled once per test binary. It fails
// the test, naming the install command, when the guest is not installed:
// `make test` installs it first.
func Python(t testing.TB) *sandbox.Guest {
	t.Helper()
	python.once.Do(func() {
		python.guest, python.err = sandbox.CompilePython(context.Background(), nil)
	})
	require.NoError(t, python.err, "the Python guest is needed; `make test` installs it (and builds the built guest)")
	return python.guest
}

var sessions struct {
	once  sync.Once
	guest *sandbox.Guest
	err   error
}

// PythonSessions returns the session build of the Python guest, compiled
// once per test binary. It skips the test when Binaryen's wasm-opt, which
// prepares that build, is not installed, and fails it when the build is
// not prepared: `make test` prepares it first.
func PythonSessions(t testing.TB) *sandbox.Guest {
	t.Helper()
	if _, err := exec.LookPath("wasm-opt"); err != nil {
		t.Skip("Binaryen's wasm-opt is not installed: no session build")
	}
	sessions.once.Do(func() {
		sessions.guest, sessions.err = sandbox.CompilePython(context.Background(), &sandbox.Options{Sessions: true})
	})
	require.NoError(t, sessions.err, "the session build of the Python guest is needed; `make test` prepares it")
	return sessions.guest
}

var builds sync.Map // package path -> *build

type build struct {
	once sync.Once
	wasm []byte
	err  error
}

// BuildGo compiles the Go main package at pkg (a path relative to the
// module root, such as "guests/testguest") with GOOS=wasip1 GOARCH=wasm and
// returns the binary. Each package is built once per test binary.
func BuildGo(t testing.TB, pkg string) []byte {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "fumehood-wasip1-")
		if err != nil {
			b.err = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "guest.wasm")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, "./"+pkg)
		cmd.Dir = ModuleRoot(t)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = &buildError{pkg: pkg, out: string(msg), err: err}
			return
		}
		b.wasm, b.err = os.ReadFile(out)
	})
	require.NoError(t, b.err)
	return b.wasm
}

type buildError struct {
	pkg, out string
	err      error
}

func (e *buildError) Error() string {
	return "building " + e.pkg + " for wasip1: " + e.err.Error() + "\n" + e.out
}

// ModuleRoot returns the directory holding go.mod.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test's directory")
		dir = parent
	}
}
