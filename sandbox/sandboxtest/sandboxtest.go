// Package sandboxtest gives tests the Python guest, compiled once per test
// binary, as net/http/httptest gives them servers.
//
// Compiling the guest takes a while (loading it from the cache, then
// wazero's compilation); a test binary that calls Python from many tests
// pays it once. Without a built guest (a fresh clone's `go test ./...`),
// the tests that need it are skipped with a message that names the command
// that builds it; with $FUMEHOOD_REQUIRE_GUEST set (CI sets it), they fail
// instead, so that nothing is skipped there.
package sandboxtest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/fumehood/fumehood/sandbox"
)

// RequireEnv names the environment variable that turns the skip of a test
// that needs the Python guest, when it is not built, into a failure.
const RequireEnv = "FUMEHOOD_REQUIRE_GUEST"

var python struct {
	sync.Once
	guest *sandbox.Guest
	err   error
}

// Python returns the Python guest, compiled once per test binary. When the
// guest is not built it skips the test, naming the command that builds it
// (fails it with $FUMEHOOD_REQUIRE_GUEST set); any other error fails it.
func Python(t testing.TB) *sandbox.Guest {
	t.Helper()
	python.Do(func() {
		python.guest, python.err = sandbox.CompilePython(context.Background(), nil)
	})
	if python.err != nil {
		if errors.Is(python.err, sandbox.ErrGuestNotBuilt) && os.Getenv(RequireEnv) == "" {
			t.Skipf("sandboxtest: the Python guest is not built (run `make guest-build`, or `go run ./cmd/fumehood guest build`): %v", python.err)
		}
		t.Fatalf("sandboxtest: the Python guest is needed (`make guest-build` builds it): %v", python.err)
	}
	return python.guest
}

// PythonSessions is Python: the one Python guest has sessions. It is kept
// for the branches written before there was one guest.
//
// Deprecated: use Python.
func PythonSessions(t testing.TB) *sandbox.Guest {
	t.Helper()
	return Python(t)
}
