package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fumehood/fumehood/guests/python"
)

func cmdGuest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{"guest needs a subcommand: install or info"}
	}
	fs := flag.NewFlagSet("guest "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	cacheDir := fs.String("cache-dir", "", "cache directory (default $"+python.CacheDirEnv+" or the user cache directory)")
	tarball := fs.String("from", "", "install from this package tarball instead of downloading it")
	session := fs.Bool("session", false, "the session build (pausable, for sessions); needs Binaryen's wasm-opt")
	if err := fs.Parse(args[1:]); err != nil {
		return &usageError{err.Error()}
	}
	opts := &python.Options{CacheDir: *cacheDir, Tarball: *tarball}
	switch args[0] {
	case "install":
		load, install := python.Load, python.Install
		if *session {
			load, install = python.LoadSession, python.InstallSession
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
	case "info":
		load := python.Load
		if *session {
			load = python.LoadSession
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

func (p *progress) report(e python.Progress) {
	switch e.Stage {
	case "download":
		if p.stage != "download" {
			fmt.Fprintf(p.w, "downloading %s@%s\n", python.Package, python.Version)
		}
		if p.tty {
			if e.Total > 0 {
				fmt.Fprintf(p.w, "\r  %5.1f / %.1f MB (%3d%%)", mb(e.Done), mb(e.Total), e.Done*100/e.Total)
			} else {
				fmt.Fprintf(p.w, "\r  %5.1f MB", mb(e.Done))
			}
		}
	case "prepare":
		p.endLine()
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
