package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fumehood/fumehood/internal/guests/cpython"
	"github.com/fumehood/fumehood/internal/guests/npm"
	"github.com/fumehood/fumehood/sandbox"
)

func cmdGuest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{"guest needs a subcommand: install, build, info, export or import"}
	}
	fs := flag.NewFlagSet("guest "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	cacheDir := fs.String("cache-dir", "", "cache directory (default $"+npm.CacheDirEnv+" or the user cache directory)")
	tarball := fs.String("from", "", "install from this package tarball instead of downloading it")
	session := fs.Bool("session", false, "install, build: the session build (pausable, for sessions); needs Binaryen's wasm-opt")
	built := fs.Bool("built", false, "info: the CPython "+cpython.PythonVersion+" guest built by \"guest build\"")
	npmOnly := fs.Bool("npm", false, "info: the npm guest (CPython "+npm.Version+")")
	force := fs.Bool("force", false, "build: build again even when the built guest is in the cache")
	with := fs.String("with", "", "build, info --built: the variant with these optional parts, comma-separated ("+cpython.Numpy+")")
	numpySource := fs.String("numpy-source", "", "build --with numpy: numpy's source tarball (pinned by SHA-256; see DESIGN)")
	cythonSource := fs.String("cython-source", "", "build --with numpy: Cython's source tarball (pinned by SHA-256)")
	if help, err := parse(fs, args[1:]); help || err != nil {
		return err
	}
	opts := &npm.Options{CacheDir: *cacheDir, Tarball: *tarball}
	switch args[0] {
	case "install":
		load, install := npm.Load, npm.Install
		if *session {
			load, install = npm.LoadSession, npm.InstallSession
		}
		if _, b, err := load(ctx, opts); err == nil {
			fmt.Fprintf(stderr, "%s@%s is already installed: %s\n", b.Package, b.Version, b.Path)
			return nil
		}
		opts.Progress = newProgress(stderr).report
		start := time.Now()
		b, err := install(ctx, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "installed %s@%s in %v: %s\n", b.Package, b.Version, time.Since(start).Round(time.Millisecond), b.Path)
		return nil
	case "build":
		bopts := &cpython.Options{CacheDir: *cacheDir, Force: *force, Progress: newProgress(stderr).report,
			With: splitList(*with), Sources: map[string]string{"numpy": *numpySource, "cython": *cythonSource}}
		if *session {
			// The session build of the built guest (the guest must be built).
			if _, _, s, err := cpython.LoadSession(ctx, bopts); err == nil && !*force {
				fmt.Fprintf(stderr, "the session build of CPython %s is already prepared: sha256:%s\n", cpython.PythonVersion, s.SHA256)
				return nil
			}
			start := time.Now()
			s, err := cpython.PrepareSession(ctx, bopts)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "prepared the session build of CPython %s in %v: %d bytes (sha256:%s)\n",
				cpython.PythonVersion, time.Since(start).Round(time.Second), s.Size, s.SHA256)
			return nil
		}
		if !*force {
			if info, err := cpython.Built(bopts); err == nil {
				fmt.Fprintf(stderr, "CPython %s is already built: sha256:%s\n", info.Python, info.WasmSHA256)
				return nil
			}
		}
		start := time.Now()
		info, err := cpython.Build(ctx, bopts)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "built CPython %s in %v: python.wasm %d bytes (sha256:%s), standard library %d bytes (sha256:%s)\n",
			info.Python, time.Since(start).Round(time.Second), info.WasmSize, info.WasmSHA256, info.StdlibSize, info.StdlibSHA256)
		return nil
	case "export", "import":
		if fs.NArg() != 1 {
			return &usageError{"guest " + args[0] + " needs one FILE"}
		}
		copts := &cpython.Options{CacheDir: *cacheDir, Progress: newProgress(stderr).report}
		start := time.Now()
		if args[0] == "export" {
			info, err := cpython.ExportFile(ctx, fs.Arg(0), copts)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "exported CPython %s (key %.12s) to %s in %v\n", info.Python, info.Key, fs.Arg(0), time.Since(start).Round(time.Millisecond))
			return nil
		}
		info, err := cpython.ImportFile(ctx, fs.Arg(0), copts)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "imported CPython %s (key %.12s, python.wasm sha256:%s) in %v\n", info.Python, info.Key, info.WasmSHA256, time.Since(start).Round(time.Millisecond))
		return nil
	case "info":
		kind := sandbox.GuestNPM
		if *built {
			kind = sandbox.GuestBuilt
		} else if !*npmOnly {
			k, err := sandbox.ChooseGuest(&sandbox.Options{CacheDir: *cacheDir, With: splitList(*with)})
			if err != nil {
				return err
			}
			kind = k
			fmt.Fprintf(stdout, "guest:    %s (the one sandboxes load; $%s or --built/--npm choose)\n", kind, sandbox.GuestEnv)
		}
		if kind == sandbox.GuestBuilt {
			copts := &cpython.Options{CacheDir: *cacheDir, With: splitList(*with)}
			info, err := cpython.Built(copts)
			if err != nil {
				return err
			}
			printBuilt(stdout, info)
			fmt.Fprintln(stdout, "sessions:  this build, from pre-initialized images (the driver's entry points; no session build needed)")
			if _, _, ses, err := cpython.LoadSession(ctx, copts); err == nil {
				fmt.Fprintf(stdout, "asyncify:  sha256:%s (%d bytes; %s; the session build, kept for comparison, unused)\n", ses.SHA256, ses.Size, strings.Join(ses.Steps[len(ses.Steps)-2:], ", "))
			}
			return nil
		}
		load := npm.Load
		if *session {
			load = npm.LoadSession
		}
		_, b, err := load(ctx, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "package:  %s@%s\nsource:   sha256:%s\nprepared: sha256:%s\nsteps:    %s\npath:     %s\nsize:     %d bytes\n",
			b.Package, b.Version, b.SourceSHA256, b.SHA256, strings.Join(b.Steps, ", "), b.Path, b.Size)
		return nil
	}
	return &usageError{fmt.Sprintf("unknown guest subcommand %q", args[0])}
}

// progress prints installation progress: a line rewritten in place on a
// terminal, a line per stage elsewhere.
type progress struct {
	w     io.Writer
	tty   bool
	stage string
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) report(e npm.Progress) {
	switch e.Stage {
	case "download":
		if p.stage != "download" {
			fmt.Fprintf(p.w, "downloading %s@%s\n", npm.Package, npm.Version)
		}
		if p.tty {
			if e.Total > 0 {
				fmt.Fprintf(p.w, "\r  %5.1f / %.1f MB (%3d%%)", mb(e.Done), mb(e.Total), e.Done*100/e.Total)
			} else {
				fmt.Fprintf(p.w, "\r  %5.1f MB", mb(e.Done))
			}
		}
	case "fetch":
		p.endLine()
		fmt.Fprintf(p.w, "fetching %s\n", e.Step)
	case "build":
		p.endLine()
		fmt.Fprintf(p.w, "building: step %d of %d: %s\n", e.Done+1, e.Total, e.Step)
	case "prepare":
		p.endLine()
		if e.Step == "" {
			return
		}
		fmt.Fprintf(p.w, "preparing: step %d of %d: %s\n", e.Done+1, e.Total, e.Step)
	default:
		p.endLine()
		fmt.Fprintf(p.w, "%s\n", map[string]string{"verify": "verifying integrity", "extract": "extracting python.wasm"}[e.Stage])
	}
	p.stage = e.Stage
}

func (p *progress) endLine() {
	if p.tty && p.stage == "download" {
		fmt.Fprintln(p.w)
	}
}

func mb(n int64) float64 { return float64(n) / 1e6 }

// printBuilt prints what went into the built guest and what came out.
// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func printBuilt(w io.Writer, info cpython.Info) {
	fmt.Fprintf(w, "python:    CPython %s for wasm32-wasi (recipe %d, key %s)\n", info.Python, info.Recipe, info.Key)
	if len(info.With) > 0 {
		fmt.Fprintf(w, "with:      %s\n", strings.Join(info.With, ", "))
		fmt.Fprintf(w, "built-in:  %s\n", strings.Join(info.Builtins, " "))
	}
	fmt.Fprintf(w, "toolchain: %s\n", info.Toolchain)
	for _, in := range info.ToolchainInputs {
		fmt.Fprintf(w, "  %-25s %-26s %s sha256:%s\n", in.Package, in.Version, in.Suite, in.SHA256)
	}
	fmt.Fprintf(w, "wasm:      sha256:%s (%d bytes, debug sections stripped)\n", info.WasmSHA256, info.WasmSize)
	fmt.Fprintf(w, "prepared:  sha256:%s (%s)\n", info.PreparedSHA256, strings.Join(info.PreparedSteps, ", "))
	fmt.Fprintf(w, "stdlib:    sha256:%s (%d bytes: lib/python313.zip, share/zoneinfo; mounted read-only at %s)\n", info.StdlibSHA256, info.StdlibSize, cpython.StdlibMountPath)
	fmt.Fprintf(w, "built in:  %gs\n", info.BuildSeconds)
	fmt.Fprintln(w, "inputs:")
	for _, in := range info.Inputs {
		fmt.Fprintf(w, "  %-10s %-28s %-7s %s\n             %s sha256:%s\n", in.Package, in.Version, in.Suite, in.Upstream, in.File, in.SHA256)
	}
	for _, in := range info.LocalInputs {
		fmt.Fprintf(w, "  %-10s %s\n             %s sha256:%s\n", in.Name, in.Upstream, in.File, in.SHA256)
	}
	fmt.Fprintln(w, "flags:")
	for _, f := range info.Flags {
		fmt.Fprintf(w, "  %s\n", f)
	}
}
