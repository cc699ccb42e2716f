package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/fumehood/fumehood/sandbox"
)

// cmdExec runs a WASI preview 1 program (any language's) in a sandbox,
// with the same limits, files and environment flags as run.
func cmdExec(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: fumehood exec [flags] FILE.wasm [ARGS...]\n\n"+
			"Runs a WASI preview 1 program (its _start) with ARGS after its name,\n"+
			"under the same limits as run.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	stats := fs.Bool("stats", false, "print one JSON line of statistics on stderr after the run")
	var c common
	c.register(fs)
	if help, err := parse(fs, args); help || err != nil {
		return 0, err
	}
	rest := fs.Args()
	switch {
	case len(rest) == 0:
		return 0, &usageError{"exec needs FILE.wasm"}
	case *c.resume != "" || *c.snapshot != "":
		return 0, &usageError{"exec runs no sessions: --resume and --snapshot are for Python"}
	case *c.with != "":
		return 0, &usageError{"exec runs the WASI program given: --with is for Python"}
	}
	opts, lim, err := c.config(stdout, stderr)
	if err != nil {
		return 0, err
	}
	opts.Stdin = stdin
	wasm, err := os.ReadFile(rest[0])
	if err != nil {
		return 0, err
	}
	g, err := sandbox.Compile(ctx, wasm, &sandbox.Options{CacheDir: *c.cacheDir})
	if err != nil {
		return 0, err
	}
	defer g.Close()
	sb, err := c.openSandbox(g, lim)
	if err != nil {
		return 0, err
	}
	defer sb.Close()
	res, err := sb.Exec(ctx, opts, rest[1:]...)
	if *stats && res != nil {
		writeStats(stderr, res, err)
	}
	return exitStatus(res, err)
}
