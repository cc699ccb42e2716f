package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/fumehood/fumehood/sandbox"
)

const replHelp = `Type Python code; a statement that opens a block (a line ending in ':')
continues until an empty line. The value of a final expression is printed.
Commands:
  :snapshot FILE   save the session to FILE (resume it with --resume FILE)
  :help            this text
  :quit            leave (so do end of input and exit())
`

// cmdRepl is an interactive session: one interpreter whose state lasts
// from one input to the next, with every run's limits.
func cmdRepl(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("repl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: fumehood repl [flags]\n\n"+replHelp+"\nFlags:\n")
		fs.PrintDefaults()
	}
	var c common
	c.register(fs)
	if help, err := parse(fs, args); help || err != nil {
		return 0, err
	}
	if fs.NArg() > 0 {
		return 0, &usageError{"repl takes no arguments"}
	}
	cfg, lim, err := c.config(stdout, stderr)
	if err != nil {
		return 0, err
	}
	// Interrupts are the REPL's from the start: one during start-up stops
	// it, one during a run stops that run.
	interrupts, stopInterrupts := replInterrupts()
	defer stopInterrupts()
	startCtx, started := interruptible(ctx, interrupts)
	py, err := c.compile(startCtx, true, stderr)
	if err != nil {
		started()
		return 0, err
	}
	defer py.Close()
	s, err := c.openSession(startCtx, py, lim)
	started()
	if err != nil {
		return 0, err
	}
	defer s.Close()

	in := replLineReader(stdin, stderr)
	defer in.Close()
	fmt.Fprintf(stderr, "fumehood %s: CPython in a sandbox; :help for help\n", py.ID()[:12])
	for {
		src, err := readInput(in)
		if errors.Is(err, errInterrupted) {
			continue // Ctrl-C at the prompt drops the input, as Python's REPL does
		}
		eof := err != nil
		if eof && !errors.Is(err, io.EOF) {
			return exitFailure, fmt.Errorf("reading input: %w", err)
		}
		trimmed := strings.TrimSpace(src)
		switch {
		case trimmed == "" && eof:
			if *c.snapshot != "" {
				if err := s.SnapshotFile(*c.snapshot); err != nil {
					return exitFailure, fmt.Errorf("saving the session: %w", err)
				}
			}
			fmt.Fprintln(stderr)
			return 0, nil
		case trimmed == "":
			continue
		case trimmed == ":quit" || trimmed == ":q":
			return 0, nil
		case trimmed == ":help":
			fmt.Fprint(stderr, replHelp)
			continue
		case strings.HasPrefix(trimmed, ":snapshot"):
			file := strings.TrimSpace(strings.TrimPrefix(trimmed, ":snapshot"))
			if file == "" {
				fmt.Fprintln(stderr, "usage: :snapshot FILE")
			} else if err := s.SnapshotFile(file); err != nil {
				fmt.Fprintf(stderr, "fumehood: %v\n", err)
			} else {
				fmt.Fprintf(stderr, "saved to %s\n", file)
			}
			continue
		case strings.HasPrefix(trimmed, ":"):
			fmt.Fprintf(stderr, "unknown command %s; :help lists them\n", trimmed)
			continue
		}
		res, err := runInterruptible(ctx, interrupts, func(ctx context.Context) (*sandbox.Result, error) {
			return s.Run(ctx, src, cfg)
		})
		if res != nil && res.HasValue {
			fmt.Fprintln(stdout, res.Value)
		}
		var exit *sandbox.ExitError
		var exc *sandbox.Exception
		switch {
		case err == nil, errors.As(err, &exc):
			// The traceback is on stderr already.
		case errors.As(err, &exit) && res != nil && res.Stop == sandbox.StopExit:
			return exit.Code, nil // exit() or SystemExit
		case errors.Is(err, sandbox.ErrClosed):
			return exitFailure, err
		default:
			code, werr := exitStatus(res, err)
			if werr == nil {
				werr = err
			}
			fmt.Fprintf(stderr, "fumehood: %v (exit status %d for a script); the session is as it was before\n", werr, code)
		}
		if eof {
			return 0, nil
		}
	}
}

// readInput reads one input: a line, or, when the line opens a block or
// leaves brackets open, lines until an empty one. At the end of the input
// it returns what it read with io.EOF.
func readInput(in lineReader) (string, error) {
	var b strings.Builder
	prompt := ">>> "
	for {
		line, err := in.ReadLine(prompt)
		if errors.Is(err, errInterrupted) {
			return "", err
		}
		if line != "" || err == nil {
			b.WriteString(line)
			b.WriteByte('\n')
		}
		if err != nil || !continues(b.String(), line) {
			return b.String(), err
		}
		prompt = "... "
	}
}

// replLineReader makes the REPL's line reader; tests replace it.
var replLineReader = newLineReader

// replInterrupts delivers the process's interrupts (SIGINT) to the REPL,
// which stops the running code only, instead of ending the process; the
// function returned stops the delivery. Tests replace it.
var replInterrupts = defaultReplInterrupts

func defaultReplInterrupts() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt)
	return ch, func() { signal.Stop(ch) }
}

// runInterruptible runs f with a context that an interrupt cancels: the
// run it makes is stopped, the session stays as it was before, and the
// next input runs as usual. An interrupt from before the run is dropped.
func runInterruptible(ctx context.Context, interrupts <-chan os.Signal, f func(context.Context) (*sandbox.Result, error)) (*sandbox.Result, error) {
	for len(interrupts) > 0 {
		<-interrupts
	}
	ctx, done := interruptible(ctx, interrupts)
	defer done()
	return f(ctx)
}

// interruptible returns a context that the next interrupt cancels, until
// done is called.
func interruptible(ctx context.Context, interrupts <-chan os.Signal) (_ context.Context, done func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-interrupts:
			cancel()
		case <-stop:
		}
	}()
	return ctx, func() {
		close(stop)
		<-finished
		cancel()
	}
}

// continues reports whether input so far, whose last line is line, needs
// more lines: a block is open and the last line is not empty, brackets are
// open, or the line ends in a backslash.
func continues(input, line string) bool {
	t := strings.TrimRight(line, " \t\r\n")
	if t == "" {
		return false
	}
	if strings.HasSuffix(t, "\\") {
		return true
	}
	depth := 0
	for _, r := range input {
		switch r {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		}
	}
	if depth > 0 {
		return true
	}
	first := strings.TrimRight(strings.SplitN(input, "\n", 2)[0], " \t\r")
	return strings.HasSuffix(first, ":")
}
