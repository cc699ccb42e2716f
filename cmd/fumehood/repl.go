package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	py, err := c.compile(ctx, true, stderr)
	if err != nil {
		return 0, err
	}
	defer py.Close()
	s, err := c.openSession(ctx, py, lim)
	if err != nil {
		return 0, err
	}
	defer s.Close()

	in := bufio.NewReader(stdin)
	fmt.Fprintf(stderr, "fumehood %s: CPython in a sandbox; :help for help\n", py.ID()[:12])
	for {
		src, eof := readInput(in, stderr)
		trimmed := strings.TrimSpace(src)
		switch {
		case trimmed == "" && eof:
			if *c.snapshot != "" {
				if err := s.SnapshotFile(*c.snapshot); err != nil {
					return exitFailure, fmt.Errorf("saving the session: %w", err)
				}
			}
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
		res, err := s.Run(ctx, src, cfg)
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
// leaves brackets open, lines until an empty one.
func readInput(in *bufio.Reader, prompt io.Writer) (src string, eof bool) {
	fmt.Fprint(prompt, ">>> ")
	var b strings.Builder
	for {
		line, err := in.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
				b.WriteByte('\n')
			}
			return b.String(), true
		}
		if !continues(b.String(), line) {
			return b.String(), false
		}
		fmt.Fprint(prompt, "... ")
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
