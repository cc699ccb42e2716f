// Package sandboxtest gives tests the Python guest, compiled once per test
// binary, as net/http/httptest gives them servers.
//
// Compiling the guest takes a while (loading it from the cache, then
// wazero's compilation); a test binary that calls Python from many tests
// pays it once. The guest is the library's default (the built guest where
// it is built, else the npm guest) unless $FUMEHOOD_TEST_GUEST or
// $FUMEHOOD_GUEST names one.
package sandboxtest

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/fumehood/fumehood/sandbox"
)

// GuestEnv names the environment variable that chooses the Python guest
// of a test binary that imports sandboxtest (and of the programs it
// starts), as `FUMEHOOD_TEST_GUEST=npm go test ./...`: it overrides
// sandbox.GuestEnv for tests only.
const GuestEnv = "FUMEHOOD_TEST_GUEST"

func init() {
	if v := os.Getenv(GuestEnv); v != "" {
		os.Setenv(sandbox.GuestEnv, v)
	}
}

// Guest returns the kind of Python guest the tests run on:
// sandbox.GuestBuilt or sandbox.GuestNPM.
func Guest(t testing.TB) string {
	t.Helper()
	kind, err := sandbox.ChooseGuest(nil)
	if err != nil {
		t.Fatalf("sandboxtest: %v", err)
	}
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

type once struct {
	sync.Once
	guest *sandbox.Guest
	err   error
}

var python, sessions once

// Python returns the Python guest, compiled once per test binary. It fails
// the test, naming the install command, when the guest is not installed.
func Python(t testing.TB) *sandbox.Guest {
	t.Helper()
	python.Do(func() {
		python.guest, python.err = sandbox.CompilePython(context.Background(), nil)
	})
	if python.err != nil {
		t.Fatalf("sandboxtest: the Python guest is needed (`make test` installs it): %v", python.err)
	}
	return python.guest
}

// PythonSessions returns a Python guest that has sessions, compiled once
// per test binary: the built guest is Python's (its one build has them);
// the npm guest's is its session build. It skips the test when Binaryen's
// wasm-opt, which prepares the npm guest's session build, is not
// installed, and fails it when the build is not prepared.
func PythonSessions(t testing.TB) *sandbox.Guest {
	t.Helper()
	if Guest(t) == sandbox.GuestBuilt {
		return Python(t)
	}
	if _, err := exec.LookPath("wasm-opt"); err != nil {
		t.Skip("sandboxtest: Binaryen's wasm-opt is not installed: no session build")
	}
	sessions.Do(func() {
		sessions.guest, sessions.err = sandbox.CompilePython(context.Background(), &sandbox.Options{Sessions: true})
	})
	if sessions.err != nil {
		t.Fatalf("sandboxtest: the session build of the Python guest is needed (`make test` prepares it): %v", sessions.err)
	}
	return sessions.guest
}
