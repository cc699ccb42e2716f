# fumehood: the two commands of the quick start are `make demo` and `make test`.
GO      ?= go
BIN     := bin/fumehood
SNIPPET := import sys, platform; print(f"Hello from CPython {sys.version.split()[0]} on {platform.machine()}, sandboxed:", sum(i * i for i in range(10)))

.PHONY: all build guest session-guest tools guest-build-tools guest-build guest-build-session guest-build-numpy demo test vet fuzz soak race bench clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/fumehood

# Fetch, verify and prepare the Python guest (cached: a no-op once done).
guest: build
	$(BIN) guest install

# Binaryen's wasm-opt prepares the session build; on a Debian machine it is
# installed if missing (as root), elsewhere the session tests are skipped.
tools:
	@command -v wasm-opt >/dev/null || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq binaryen; } || \
		echo "note: Binaryen's wasm-opt is not installed: the session build and its tests are skipped"

# The session build: about two minutes once per machine (asyncify).
session-guest: build tools
	@if command -v wasm-opt >/dev/null; then $(BIN) guest install --session; fi

# Our own CPython 3.13.5 guest, built from pinned sources (internal/guests/cpython).
# The build fetches its cross toolchain (bookworm's LLVM 19, pinned by SHA-256)
# into the cache with apt's own client, so it needs no root. It needs a few
# native build tools (a C compiler for the build Python, make, tcl, xz; ninja for
# the numpy variant): installed here if missing when run as root on a Debian
# machine, else named, and the build's own error names them too.
GUEST_BUILD_PACKAGES := gcc make tcl xz-utils ninja-build
guest-build-tools:
	@missing=""; for c in cc make tclsh xz ninja; do command -v $$c >/dev/null || missing=1; done; \
		if [ -n "$$missing" ]; then \
			if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
				apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(GUEST_BUILD_PACKAGES); \
			else echo "note: the guest build needs the Debian packages $(GUEST_BUILD_PACKAGES) (as root: apt-get install $(GUEST_BUILD_PACKAGES))"; fi; \
		fi

guest-build: build guest-build-tools
	$(BIN) guest build
	$(BIN) guest info --built

# The session build of the built guest (asyncify: a few minutes, once). Its
# sessions do not need it (they run on the driver's entry points): it is
# kept to compare the two.
guest-build-session: guest-build tools
	@if command -v wasm-opt >/dev/null; then $(BIN) guest build --session; fi

# The variant with numpy 2.2.5 built in (internal/guests/cpython/numpy.go). Its two
# source tarballs cannot come through apt: NUMPY_SOURCES names a directory
# holding them (see NumpyInputs); once verified they are kept in the cache.
# Debian's python3-pytest (pure Python, mounted read-only into the guest) is
# what TestNumpyTestSuiteSlice runs numpy's own tests with: installed here
# if missing (as root on a Debian machine), else that test is skipped.
NUMPY_SOURCES ?=
guest-build-numpy: build guest-build-tools
	@[ -d /usr/lib/python3/dist-packages/_pytest ] || \
		{ command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pytest; } || \
		echo "note: install Debian's python3-pytest to run numpy's tests in the guest (TestNumpyTestSuiteSlice)"
	$(BIN) guest build --with numpy $(if $(NUMPY_SOURCES),--numpy-source $(NUMPY_SOURCES)/numpy-2.2.5-with-submodules.tar.xz --cython-source $(NUMPY_SOURCES)/cython-3.1.8.tar.xz)
	$(BIN) guest info --built --with numpy

# The demo runs on our own CPython 3.13 guest, built first if it is not in the
# cache (about 10 minutes on 2 cores from an empty cache, no root; the build
# prints its steps).
demo: guest-build
	$(BIN) run -c '$(SNIPPET)'

# The whole suite runs on the built guest (the default where it is built),
# then the packages that load guests and run sessions again on the npm guest,
# the fallback. A machine that cannot build the guest runs everything on the
# npm guest. examples/agents is a module of its own (it needs model SDKs,
# fumehood does not): go test ./... does not enter it.
NPM_FALLBACK_PACKAGES ?= ./sandbox ./internal/guests/... ./cmd/fumehood ./mcpserver ./codetool
test: guest session-guest
	@$(MAKE) --no-print-directory guest-build || \
		echo "note: the built guest could not be built: the tests run on the npm guest"
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) vet ./...
	GOARCH=arm64 $(GO) vet ./...
	$(BIN) guest info | head -1
	$(GO) test -timeout 30m ./...
	FUMEHOOD_GUEST=npm $(GO) test -timeout 30m $(NPM_FALLBACK_PACKAGES)
	cd examples/agents && $(GO) vet ./... && $(GO) test ./...

# Short fuzzing runs of everything that parses untrusted bytes.
FUZZTIME ?= 30s
fuzz:
	GO=$(GO) scripts/fuzz.sh $(FUZZTIME) \
		./internal/wasmbin:FuzzParse \
		./internal/fuel:FuzzInstrument \
		./internal/errnoshim:FuzzShim \
		./internal/hostchan:FuzzDecodeFrame \
		./internal/wasifs:FuzzResolve:-fuzzminimizetime=5s \
		./internal/snapshot:FuzzDecode \
		./internal/wasmbin:FuzzExportMutableGlobals \
		./internal/wasmbin:FuzzBounds \
		./sandbox:FuzzCompile \
		./cmd/fumehood:FuzzParseSize \
		./cmd/fumehood:FuzzMountFlag \
		./cmd/fumehood:FuzzEnvFlag \
		./mcpserver:FuzzCheckLine \
		./mcpserver:FuzzTruncate \
		./codetool:FuzzParseInput \
		./internal/guests/cpython:FuzzReadExport \
		./internal/guests/cpython:FuzzDecodeOutcome

# 10,000 one-shot runs and 1,000 session runs in one process, goroutines and live heap measured
# before and after (a few minutes); `go test` runs 200.
SOAK_RUNS ?= 10000
soak: guest
	FUMEHOOD_SOAK_RUNS=$(SOAK_RUNS) FUMEHOOD_SOAK_SESSION_RUNS=1000 $(GO) test ./sandbox -run 'TestSoak' -count=1 -v -timeout 60m

# The concurrency tests, the soak's short form and the hostile suite under
# the race detector.
race: guest
	$(GO) test -race ./sandbox -run 'TestConcurrent|TestSoak|TestHostile|TestHuge|TestTable|TestSessionConcurrentUse|TestSessionCloseStops|TestSessionForks|TestSessionOpenFiles|TestSessionSnapshot|TestOneShotLayouts' -count=1 -short -timeout 30m

# Benchmarks against native CPython, bubblewrap and Pyodide (installed by
# bench/setup.sh into the cache directory): several minutes, not part of test.
# Writes the tables into bench/README.md and bench/results.json.
BENCHFLAGS ?=
bench: guest
	@pyodide="$$(sh bench/setup.sh)" && $(GO) build -o bin/bench ./bench && \
		bin/bench -fumehood $(BIN) -pyodide "$$pyodide" -markdown bench/README.md -json bench/results.json $(BENCHFLAGS)

clean:
	rm -rf bin
