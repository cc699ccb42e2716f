package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/cache"
)

func cmdGuest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{"guest needs a subcommand: build, info, export or import"}
	}
	if args[0] == "install" {
		return &usageError{"guest install is gone with the npm guest: `fumehood guest build` builds the Python guest (CPython " +
			cpython.PythonVersion + "), or `fumehood guest import FILE` imports one that `guest export` wrote on another machine"}
	}
	fs := flag.NewFlagSet("guest "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	cacheDir := fs.String("cache-dir", "", "cache directory (default $"+cache.DirEnv+" or the user cache directory)")
	fs.Bool("built", false, "info: accepted for old scripts (there is one Python guest)")
	force := fs.Bool("force", false, "build: build again even when the guest is in the cache")
	with := fs.String("with", "", "build, info: the variant with these optional parts, comma-separated ("+cpython.Numpy+", "+cpython.Pandas+" (implies numpy), "+
		cpython.Matplotlib+" (implies numpy), "+cpython.Data+" (numpy, pandas and matplotlib))")
	numpySource := fs.String("numpy-source", "", "build --with numpy, pandas, matplotlib or data: numpy's source tarball (pinned by SHA-256; see NumpyInputs)")
	cythonSource := fs.String("cython-source", "", "build --with numpy, pandas, matplotlib or data: Cython's source tarball (pinned by SHA-256)")
	mplSource := fs.String("matplotlib-source", "", "build --with matplotlib or data: matplotlib's source tarball (pinned by SHA-256; see MatplotlibLocalInputs)")
	kiwiSource := fs.String("kiwisolver-source", "", "build --with matplotlib or data: kiwisolver's source tarball (pinned by SHA-256)")
	if help, err := parse(fs, args[1:]); help || err != nil {
		return err
	}
	switch args[0] {
	case "build":
		bopts := &cpython.Options{CacheDir: *cacheDir, Force: *force, Progress: newProgress(stderr).report,
			With: splitList(*with), Sources: map[string]string{
				"numpy": *numpySource, "cython": *cythonSource, "matplotlib": *mplSource, "kiwisolver": *kiwiSource}}
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
		info, err := cpython.Built(&cpython.Options{CacheDir: *cacheDir, With: splitList(*with)})
		if err != nil {
			return err
		}
		printBuilt(stdout, info)
		fmt.Fprintln(stdout, "sessions:  this build, from pre-initialized images (the driver's entry points)")
		return nil
	}
	return &usageError{fmt.Sprintf("unknown guest subcommand %q", args[0])}
}

// progress prints the progress of a build or preparation, a line per
// step.
type progress struct{ w io.Writer }

func newProgress(w io.Writer) *progress { return &progress{w: w} }

func (p *progress) report(e cache.Progress) {
	switch e.Stage {
	case "fetch":
		fmt.Fprintf(p.w, "fetching %s\n", e.Step)
	case "build":
		fmt.Fprintf(p.w, "building: step %d of %d: %s\n", e.Done+1, e.Total, e.Step)
	case "prepare":
		if e.Step != "" {
			fmt.Fprintf(p.w, "preparing: step %d of %d: %s\n", e.Done+1, e.Total, e.Step)
		}
	}
}

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

// printBuilt prints what went into the built guest and what came out.
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
