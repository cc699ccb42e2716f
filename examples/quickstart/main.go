// Command quickstart runs a Python snippet in a sandbox and prints what it
// wrote: the smallest useful fumehood program.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

const program = `
import statistics
data = [3, 1, 4, 1, 5, 9, 2, 6]
print("mean", statistics.mean(data), "median", statistics.median(data))
`

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	// Compile once per process; installs the guest on first use.
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		return err
	}
	defer py.Close()

	res, err := py.Run(ctx, program, &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 10 * time.Second}})
	var exc *sandbox.Exception
	var exit *sandbox.ExitError
	switch {
	case errors.As(err, &exc):
		return fmt.Errorf("the program raised %s:\n%s", exc.Type, exc.Traceback)
	case errors.As(err, &exit):
		return fmt.Errorf("the program failed with status %d:\n%s", exit.Code, res.Stderr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s", res.Stdout)
	fmt.Fprintf(w, "(%v, %d units of fuel)\n", res.Duration.Round(time.Millisecond), res.FuelUsed)
	return nil
}
