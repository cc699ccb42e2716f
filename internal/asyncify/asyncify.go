// Package asyncify runs Binaryen's asyncify pass over a guest, so that the
// host can pause the guest inside an imported function and resume it later,
// possibly in another instance that was given the same memory and globals.
//
// Asyncify is done by the wasm-opt command of Binaryen (Debian and Ubuntu
// package "binaryen"; version 108 is known to work). Only
// wasi_snapshot_preview1.fd_read is an asynchronous import: the guest can
// pause only while it waits for input. The pass adds the exports
// asyncify_start_unwind, asyncify_stop_unwind, asyncify_start_rewind,
// asyncify_stop_rewind and asyncify_get_state, and two mutable globals that
// it does not export (see wasmbin.ExportMutableGlobals).
//
// On CPython it takes about a minute and a half on two cores and about 1 GiB
// of memory, so its output is meant to be cached, keyed by the input and by
// the tool's Version.
package asyncify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// AsyncImport is the only import at which the guest can be paused.
const AsyncImport = "wasi_snapshot_preview1.fd_read"

// Flags are the arguments given to wasm-opt besides the input and output
// files. The enabled features are those the guest uses (mutable globals for
// the exported fuel and errno globals, sign extension for CPython); any
// other feature in the input makes wasm-opt fail rather than guess.
var Flags = []string{
	"-O1",
	"--asyncify",
	"--pass-arg=asyncify-imports@" + AsyncImport,
	"--enable-mutable-globals",
	"--enable-sign-ext",
}

// Command is the name of Binaryen's optimizer, looked up in $PATH.
const Command = "wasm-opt"

// ErrNoWasmOpt reports that wasm-opt is not installed.
var ErrNoWasmOpt = errors.New("asyncify: wasm-opt not found in $PATH: install Binaryen (Debian/Ubuntu: `apt-get install binaryen`; others: https://github.com/WebAssembly/binaryen/releases)")

// maxStderr bounds how much of wasm-opt's error output an error quotes.
const maxStderr = 4 << 10

func wasmOpt() (string, error) {
	p, err := exec.LookPath(Command)
	if err != nil {
		return "", fmt.Errorf("%w (%v)", ErrNoWasmOpt, err)
	}
	return p, nil
}

// Version returns wasm-opt's version, such as "108", taken from the output
// of `wasm-opt --version` ("wasm-opt version 108" or "wasm-opt version 116
// (version_116)"). A missing wasm-opt is an error matching ErrNoWasmOpt.
func Version(ctx context.Context) (string, error) {
	p, err := wasmOpt()
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, p, "--version")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("asyncify: %s --version: %w: %s", p, err, clip(stderr.Bytes()))
	}
	v, err := parseVersion(string(out))
	if err != nil {
		return "", fmt.Errorf("asyncify: %s --version: %w", p, err)
	}
	return v, nil
}

// parseVersion extracts the version from `wasm-opt --version` output.
func parseVersion(out string) (string, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	_, v, ok := strings.Cut(line, " version ")
	if f := strings.Fields(v); ok && len(f) > 0 {
		return f[0], nil
	}
	return "", fmt.Errorf("unexpected output %q", line)
}

// Asyncify returns wasm after wasm-opt's asyncify pass with Flags. The
// input and output go through temporary files, which are removed. A missing
// wasm-opt is an error matching ErrNoWasmOpt; a failure of wasm-opt quotes
// the end of its error output. Canceling ctx kills wasm-opt.
func Asyncify(ctx context.Context, wasm []byte) ([]byte, error) {
	p, err := wasmOpt()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fumehood-asyncify-*")
	if err != nil {
		return nil, fmt.Errorf("asyncify: %w", err)
	}
	defer os.RemoveAll(dir)
	in, out := filepath.Join(dir, "in.wasm"), filepath.Join(dir, "out.wasm")
	if err := os.WriteFile(in, wasm, 0o600); err != nil {
		return nil, fmt.Errorf("asyncify: %w", err)
	}
	args := append(append([]string{}, Flags...), in, "-o", out)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("asyncify: %w", ctx.Err())
		}
		return nil, fmt.Errorf("asyncify: %s %s: %w: %s", p, strings.Join(Flags, " "), err, clip(stderr.Bytes()))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("asyncify: %s wrote no output: %w", p, err)
	}
	return b, nil
}

// clip returns the last maxStderr bytes of b, trimmed.
func clip(b []byte) string {
	if len(b) > maxStderr {
		b = b[len(b)-maxStderr:]
	}
	return strings.TrimSpace(string(b))
}
