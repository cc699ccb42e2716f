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
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fumehood/fumehood/guests/cpython"
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
		notBuilt(t, python.err)
	}
	return python.guest
}

// Built checks that the Python guest (with the optional parts in with,
// such as "numpy") is built, without compiling it, for tests that run it
// another way: the command line, another process. When it is not built it
// skips the test as Python does, naming the command that builds it (fails
// it with $FUMEHOOD_REQUIRE_GUEST set); any other error fails it.
func Built(t testing.TB, with ...string) {
	t.Helper()
	if err := builtErr(with); err != nil {
		notBuilt(t, err)
	}
}

// built holds, per set of optional parts, whether the guest is built:
// the manifest is read once per test binary, not at every test.
var built sync.Map // strings.Join(with, ",") -> error (nil included)

// builtErr is cpython.Built's error for the guest with the parts in with.
func builtErr(with []string) error {
	key := strings.Join(with, ",")
	if v, ok := built.Load(key); ok {
		err, _ := v.(error)
		return err
	}
	_, err := cpython.Built(&cpython.Options{With: with})
	built.Store(key, err)
	return err
}

// Main runs m's tests and examples, for a package's TestMain, and returns
// the code to pass to os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m)) }
//
// An example cannot skip itself, so when the Python guest is not built
// (and $FUMEHOOD_REQUIRE_GUEST is not set) Main skips the package's
// examples, saying so on stderr; tests skip themselves through Python and
// Built.
func Main(m *testing.M) int {
	if err := builtErr(nil); errors.Is(err, sandbox.ErrGuestNotBuilt) && os.Getenv(RequireEnv) == "" {
		flag.Parse()
		skip := "^Example"
		if f := flag.Lookup("test.skip"); f != nil {
			if old := f.Value.String(); old != "" {
				skip = old + "|" + skip
			}
			if err := flag.Set("test.skip", skip); err == nil {
				fmt.Fprintln(os.Stderr, "sandboxtest: the Python guest is not built: the examples are skipped (run `make guest-build`, or `go run ./cmd/fumehood guest build`)")
			}
		}
	}
	return m.Run()
}

// notBuilt skips or fails t for err, an error getting the built guest.
func notBuilt(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, sandbox.ErrGuestNotBuilt) && os.Getenv(RequireEnv) == "" {
		t.Skipf("sandboxtest: the Python guest is not built (run `make guest-build`, or `go run ./cmd/fumehood guest build`): %v", err)
	}
	t.Fatalf("sandboxtest: the Python guest is needed (`make guest-build` builds it): %v", err)
}

// PythonSessions is Python: the one Python guest has sessions. It is kept
// for the branches written before there was one guest.
//
// Deprecated: use Python.
func PythonSessions(t testing.TB) *sandbox.Guest {
	t.Helper()
	return Python(t)
}

// Variant compiles the built guest's variant with the optional parts in
// with (such as "data"), closed at the end of the test. A variant that is
// not built skips the test, $FUMEHOOD_REQUIRE_GUEST or not: CI builds only
// the default guest, and each variant is a long build of its own (`fumehood
// guest build --with ...`).
func Variant(t testing.TB, with ...string) *sandbox.Guest {
	t.Helper()
	if err := builtErr(with); errors.Is(err, sandbox.ErrGuestNotBuilt) {
		t.Skipf("sandboxtest: the variant with %s is not built (run `%s --with %s`): %v",
			strings.Join(with, ", "), cpython.BuildCommand, strings.Join(with, ","), err)
	} else if err != nil {
		t.Fatalf("sandboxtest: the variant with %s: %v", strings.Join(with, ", "), err)
	}
	g, err := sandbox.CompilePython(context.Background(), &sandbox.Options{With: with})
	if err != nil {
		t.Fatalf("sandboxtest: compiling the variant with %s: %v", strings.Join(with, ", "), err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}
