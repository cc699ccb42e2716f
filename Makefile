# fumehood: the two commands of the quick start are `make demo` and `make test`.
GO      ?= go
BIN     := bin/fumehood
SNIPPET := import sys, platform; print(f"Hello from CPython {sys.version.split()[0]} on {platform.machine()}, sandboxed:", sum(i * i for i in range(10)))

.PHONY: all build guest guest-build-tools guest-build guest-build-numpy guest-build-pandas guest-build-matplotlib guest-build-data demo test vet fuzz soak race bench clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/fumehood

# The Python guest: CPython 3.13.5, built from pinned sources (guests/cpython)
# into the cache (a no-op once built).
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
	$(BIN) guest info | head -1

guest: guest-build

# The variant with numpy 2.2.5 built in (guests/cpython/numpy.go). Its two
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
	$(BIN) guest info --with numpy

# The variant with pandas 2.2.3 (and numpy) built in (guests/cpython/pandas.go):
# numpy's two tarballs as above; pandas' source and its pure-Python dependencies
# come through apt. Debian's python3-pytest and python3-hypothesis run pandas'
# own tests in the guest (TestPandasTestSuiteSlice) and python3-pandas is the
# native baseline of BenchmarkPandas: installed here if missing (as root).
guest-build-pandas: build guest-build-tools
	@[ -d /usr/lib/python3/dist-packages/hypothesis ] && [ -d /usr/lib/python3/dist-packages/pandas ] || \
		{ command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pytest python3-hypothesis python3-pandas; } || \
		echo "note: install Debian's python3-pytest, python3-hypothesis and python3-pandas to run pandas' tests in the guest and its benchmark"
	$(BIN) guest build --with pandas $(if $(NUMPY_SOURCES),--numpy-source $(NUMPY_SOURCES)/numpy-2.2.5-with-submodules.tar.xz --cython-source $(NUMPY_SOURCES)/cython-3.1.8.tar.xz)
	$(BIN) guest info --with pandas

# The variant with matplotlib 3.10.9 (Agg backend; and numpy, Pillow,
# kiwisolver, contourpy, FreeType, Qhull) built in (guests/cpython/matplotlib.go),
# and the data variant: numpy, pandas and matplotlib. matplotlib's and
# kiwisolver's tarballs cannot come through apt: MPL_SOURCES names a directory
# holding them (see MatplotlibLocalInputs), like NUMPY_SOURCES for numpy's.
# The C++ runtime with exceptions (internal/cxxrt) is built first if missing.
MPL_SOURCES ?= $(NUMPY_SOURCES)
MPL_FLAGS = $(if $(NUMPY_SOURCES),--numpy-source $(NUMPY_SOURCES)/numpy-2.2.5-with-submodules.tar.xz --cython-source $(NUMPY_SOURCES)/cython-3.1.8.tar.xz) \
	$(if $(MPL_SOURCES),--matplotlib-source $(MPL_SOURCES)/matplotlib-3.10.9.tar.xz --kiwisolver-source $(MPL_SOURCES)/kiwisolver-1.4.9.tar.xz)
guest-build-matplotlib: build guest-build-tools
	$(BIN) guest build --with matplotlib $(MPL_FLAGS)
	$(BIN) guest info --with matplotlib

# Debian's python3-pytest runs matplotlib's own tests in the guest
# (TestMatplotlibTestSuiteSlice); python3-pandas and python3-matplotlib are
# BenchmarkData's native baseline: installed here if missing (as root).
guest-build-data: build guest-build-tools
	@[ -d /usr/lib/python3/dist-packages/_pytest ] && [ -d /usr/lib/python3/dist-packages/matplotlib ] && [ -d /usr/lib/python3/dist-packages/pandas ] || \
		{ command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pytest python3-hypothesis python3-pandas python3-matplotlib; } || \
		echo "note: install Debian's python3-pytest, python3-pandas and python3-matplotlib to run matplotlib's tests in the guest and the data benchmark"
	$(BIN) guest build --with data $(MPL_FLAGS)
	$(BIN) guest info --with data

# The demo runs on our own CPython 3.13 guest, built first if it is not in the
# cache (about 10 minutes on 2 cores from an empty cache, no root; the build
# prints its steps).
demo: guest-build
	$(BIN) run -c '$(SNIPPET)'

# Vet on every platform the library builds for.
vet:
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) vet ./...
	GOARCH=arm64 $(GO) vet ./...

# The whole suite, once, on the built guest (built first if missing):
# FUMEHOOD_REQUIRE_GUEST turns the skip of a test that needs the guest
# into a failure. examples/agents is a module of its own (it needs model
# SDKs, fumehood does not): go test ./... does not enter it.
test: guest vet
	FUMEHOOD_REQUIRE_GUEST=1 $(GO) test -timeout 30m ./...
	cd examples/agents && $(GO) vet ./... && FUMEHOOD_REQUIRE_GUEST=1 $(GO) test ./...

# Short fuzzing runs of everything that parses untrusted bytes.
FUZZTIME ?= 30s
fuzz:
	GO=$(GO) scripts/fuzz.sh $(FUZZTIME) \
		./internal/wasmbin:FuzzParse \
		./internal/fuel:FuzzInstrument \
		./internal/errnoshim:FuzzShim \
		./internal/exnref:FuzzTranslate \
		./internal/emeh:FuzzPrepare \
		./internal/hostchan:FuzzDecodeFrame \
		./wasi:FuzzResolve:-fuzzminimizetime=5s \
		./internal/snapshot:FuzzDecode \
		./internal/textcut:FuzzCut \
		./internal/wasmbin:FuzzExportMutableGlobals \
		./internal/wasmbin:FuzzBounds \
		./sandbox:FuzzCompile \
		./cmd/fumehood:FuzzParseSize \
		./cmd/fumehood:FuzzMountFlag \
		./cmd/fumehood:FuzzEnvFlag \
		./mcpserver:FuzzCheckLine \
		./mcpserver:FuzzTruncate \
		./codetool:FuzzParseInput \
		./guests/cpython:FuzzReadExport \
		./internal/pydriver:FuzzDecodeOutcome

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
