package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fumehood/fumehood/guests/python"
	"github.com/fumehood/fumehood/sandbox"
)

// envFlag collects repeated --env KEY=VALUE flags.
type envFlag map[string]string

func (e envFlag) String() string { return "" }

func (e envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	e[k] = v
	return nil
}

func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: fumehood run [flags] (FILE.py | -c CODE | -) [ARGS...]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	code := fs.String("c", "", "Python code to run")
	timeout := fs.Duration("timeout", sandbox.DefaultTimeout, "wall-time limit of the run")
	offline := fs.Bool("offline", false, "never download the guest; fail if it is not installed")
	cacheDir := fs.String("cache-dir", "", "cache directory (default $"+python.CacheDirEnv+" or the user cache directory)")
	env := envFlag{}
	fs.Var(env, "env", "set a guest environment variable, KEY=VALUE (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, nil
		}
		return 0, &usageError{err.Error()}
	}
	rest := fs.Args()
	codeSet := false
	fs.Visit(func(f *flag.Flag) { codeSet = codeSet || f.Name == "c" })

	cfg := &sandbox.Config{Env: env, Stdout: stdout, Stderr: stderr, Timeout: *timeout}
	if *timeout == 0 {
		cfg.Timeout = -1 // --timeout 0: no limit
	}
	var src string
	switch {
	case codeSet:
		src = *code
		cfg.Args = rest
		cfg.Stdin = stdin
	case len(rest) == 0:
		return 0, &usageError{"run needs FILE.py, -c CODE or -"}
	case rest[0] == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return 0, fmt.Errorf("reading code from stdin: %w", err)
		}
		src = string(b)
		cfg.Args = rest[1:]
	default:
		b, err := os.ReadFile(rest[0])
		if err != nil {
			return 0, err
		}
		src = string(b)
		cfg.Args = rest[1:]
		cfg.Stdin = stdin
	}

	opts := &sandbox.Options{CacheDir: *cacheDir}
	if !*offline {
		if _, _, err := python.Load(ctx, &python.Options{CacheDir: *cacheDir}); errors.Is(err, python.ErrGuestNotInstalled) {
			fmt.Fprintln(stderr, "fumehood: the Python guest is not installed; installing it now (use --offline to prevent this)")
			opts.Install = true
			opts.Progress = newProgress(stderr).report
		}
	}
	py, err := sandbox.CompilePython(ctx, opts)
	if err != nil {
		return 0, err
	}
	defer py.Close(context.WithoutCancel(ctx))

	res, err := py.Run(ctx, src, cfg)
	var exit *sandbox.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.Code, nil
	case errors.Is(err, context.DeadlineExceeded):
		return exitDeadline, fmt.Errorf("deadline exceeded after %v", res.Duration.Round(time.Millisecond))
	}
	return exitFailure, err
}
