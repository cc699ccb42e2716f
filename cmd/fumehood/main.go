// Command fumehood runs untrusted Python (or any WASI program) in a
// WebAssembly sandbox inside its own process.
//
// Usage:
//
//	fumehood run [flags] FILE.py [ARGS...]   run a script
//	fumehood run [flags] -c CODE [ARGS...]   run code given as an argument
//	fumehood run [flags] - [ARGS...]         run code read from stdin
//	fumehood run --resume FILE --snapshot FILE -c CODE
//	                                         run code in a session saved across processes
//	fumehood repl [--resume FILE]            an interactive session (:snapshot FILE saves it)
//	fumehood exec [flags] FILE.wasm [ARGS...]
//	                                         run a WASI preview 1 program under the same limits
//	fumehood mcp [--http ADDR]               an MCP server (stdio, or streamable HTTP)
//	fumehood guest install [--session]       fetch, verify and prepare the npm Python guest
//	fumehood guest build [--session]         build our own CPython 3.13 guest (the default once built)
//	fumehood guest build --with numpy        build its variant with numpy (then: run --with numpy)
//	fumehood guest info [--built|--npm]      show the guest sandboxes load ($FUMEHOOD_GUEST chooses)
//	fumehood guest export FILE               write the built guest to one file
//	fumehood guest import FILE               verify and install a file guest export wrote
//
// Exit status: the guest's own exit status when it exits (0-255, as
// python's own: sys.exit(-1) and sys.exit(2**70) exit with 255); when a limit
// stopped the run, a status of its own (stderr names the limit in words):
//
//	119  the guest ran out of stack (recursion too deep for it)
//	120  fuel exhausted
//	121  memory limit
//	122  output limit
//	123  canceled (interrupted)
//	124  deadline exceeded
//	125  fumehood itself failed (no guest, a trap, an I/O error)
//	  2  usage error
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
)

// Exit statuses fumehood uses for its own reasons.
const (
	exitUsage    = 2
	exitStack    = 119
	exitFuel     = 120
	exitMemory   = 121
	exitOutput   = 122
	exitCanceled = 123
	exitDeadline = 124
	exitFailure  = 125
)

// stackWords is what stderr says of a run that ran out of stack.
const stackWords = "the guest ran out of stack (recursion too deep for its C stack)"

func main() {
	ctx := context.Background()
	if len(os.Args) < 2 || os.Args[1] != "repl" {
		// An interrupt stops the command's run. The REPL takes its own,
		// which stop the running code only (replInterrupts).
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt)
		defer stop()
	}
	if len(os.Args) > 1 && shortLived[os.Args[1]] {
		hugeHeap()
	}
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// shortLived are the commands whose process does one run or holds one
// session, and so asks for huge pages (hugeHeap). The MCP server lives
// on, with a heap that grows and shrinks, and guest commands barely
// touch the heap.
var shortLived = map[string]bool{"run": true, "exec": true, "repl": true}

const usage = `fumehood runs untrusted code in a WebAssembly sandbox, in-process.

Usage:
  fumehood run [flags] FILE.py [ARGS...]   run a Python script
  fumehood run [flags] -c CODE [ARGS...]   run Python code given as an argument
  fumehood run [flags] - [ARGS...]         run Python code read from stdin
  fumehood run --resume FILE --snapshot FILE -c CODE
                                           run code in a session saved across processes
  fumehood repl [--resume FILE]            an interactive Python session (:snapshot FILE saves it)
  fumehood exec [flags] FILE.wasm [ARGS...]
                                           run a WASI preview 1 program, under the same limits
  fumehood mcp [--http ADDR]               serve run_python and sessions to MCP clients
  fumehood guest install [--session]       fetch, verify and prepare the npm Python guest (3.12)
  fumehood guest build [--session]         build our own CPython 3.13 guest (the default once built)
  fumehood guest build --with numpy        build its variant with numpy 2.2.5 (then: run --with numpy)
  fumehood guest info [--built|--npm]      show the Python guest sandboxes load
                                           ($FUMEHOOD_GUEST=built|npm chooses one)
  fumehood guest export FILE               write the built guest to one file
  fumehood guest import FILE               verify a file guest export wrote and install it

Run 'fumehood run -h' for the flags of run, exec and repl.
`

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// parse parses a command's flags. It reports help when -h or -help asked
// for the usage, which fs has printed; any other bad flag is a usageError.
//
// The flag package's own report of a bad flag (the error, then every
// flag's help) is not printed: run prints the error once and where the
// help is.
func parse(fs *flag.FlagSet, args []string) (help bool, err error) {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err = fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return true, nil
	}
	if err != nil {
		return false, &usageError{err.Error()}
	}
	return false, nil
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var code int
	var err error
	switch args[0] {
	case "run":
		code, err = cmdRun(ctx, args[1:], stdin, stdout, stderr)
	case "repl":
		code, err = cmdRepl(ctx, args[1:], stdin, stdout, stderr)
	case "exec":
		code, err = cmdExec(ctx, args[1:], stdin, stdout, stderr)
	case "mcp":
		err = cmdMCP(ctx, args[1:], stdin, stdout, stderr)
	case "guest":
		err = cmdGuest(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = &usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
	if err == nil {
		return code
	}
	var ue *usageError
	if errors.As(err, &ue) {
		// The mistake once, and where the help is: not pages of it.
		switch args[0] {
		case "run", "repl", "exec", "mcp":
			fmt.Fprintf(stderr, "fumehood: %v\nRun 'fumehood %s -h' for its flags.\n", err, args[0])
		case "guest":
			fmt.Fprintf(stderr, "fumehood: %v\nRun 'fumehood help' for the guest commands, 'fumehood guest %s -h' for flags.\n", err,
				guestSub(args[1:]))
		default:
			fmt.Fprintf(stderr, "fumehood: %v\n\n%s", err, usage)
		}
		return exitUsage
	}
	fmt.Fprintf(stderr, "fumehood: %v\n", err)
	if code == 0 {
		code = exitFailure
	}
	return code
}

// guestSub is the guest subcommand named in args, or "build".
func guestSub(args []string) string {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0]
	}
	return "build"
}
