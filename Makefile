# fumehood: the two commands of the quick start are `make demo` and `make test`.
GO      ?= go
BIN     := bin/fumehood
SNIPPET := import sys, platform; print(f"Hello from CPython {sys.version.split()[0]} on {platform.machine()}, sandboxed:", sum(i * i for i in range(10)))

.PHONY: all build guest session-guest tools demo test vet fuzz bench clean

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

demo: guest
	$(BIN) run -c '$(SNIPPET)'

test: guest session-guest
	$(GO) vet ./...
	$(GO) test ./...

# Short fuzzing runs of everything that parses untrusted bytes.
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./internal/wasmbin -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME)
	$(GO) test ./internal/fuel -run '^$$' -fuzz FuzzInstrument -fuzztime $(FUZZTIME)
	$(GO) test ./internal/errnoshim -run '^$$' -fuzz FuzzShim -fuzztime $(FUZZTIME)
	$(GO) test ./wasi -run '^$$' -fuzz FuzzResolve -fuzztime $(FUZZTIME) -fuzzminimizetime 5s

# Benchmarks against native CPython, bubblewrap and Pyodide (installed by
# bench/setup.sh into the cache directory): several minutes, not part of test.
# Writes the tables into bench/README.md and bench/results.json.
BENCHFLAGS ?=
bench: guest
	@pyodide="$$(sh bench/setup.sh)" && $(GO) build -o bin/bench ./bench && \
		bin/bench -fumehood $(BIN) -pyodide "$$pyodide" -markdown bench/README.md -json bench/results.json $(BENCHFLAGS)

clean:
	rm -rf bin
