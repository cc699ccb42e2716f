// Command limits shows how a sandbox bounds untrusted code: a CPU budget
// (fuel) that the host can top up, a deadline, and a memory limit.
//
//	go run ./examples/limits
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

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		return err
	}
	defer py.Close()

	// 1. A budget too small for the job, topped up three times by the host.
	grants := 0
	res, err := py.Run(ctx, "print(sum(i * i for i in range(200_000)))", &sandbox.RunOptions{
		Limits: sandbox.Limits{Fuel: 500_000_000},
		Refill: func(used int64) int64 {
			if grants == 5 {
				return 0 // no more: the run ends with ErrFuelExhausted
			}
			grants++
			return 250_000_000
		},
	})
	switch {
	case errors.Is(err, sandbox.ErrFuelExhausted):
		fmt.Fprintf(w, "fuel: exhausted after %d grants\n", grants)
	case err != nil:
		return err
	default:
		fmt.Fprintf(w, "fuel: %s after %d grants, %d used\n", trimNL(res.Stdout), grants, res.FuelUsed)
	}

	// 2. An endless loop, stopped by the deadline.
	res, err = py.Run(ctx, "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 200 * time.Millisecond}})
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("want a deadline, got %v", err)
	}
	fmt.Fprintf(w, "deadline: stopped, exit code %d\n", res.ExitCode)

	// 3. A memory bomb, refused inside the guest.
	res, err = py.Run(ctx, "x = bytearray(512 * 2**20)", &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 64 << 20}})
	if !errors.Is(err, sandbox.ErrMemoryLimit) {
		return fmt.Errorf("want the memory limit, got %v", err)
	}
	fmt.Fprintf(w, "memory: refused, the guest said %q\n", lastLine(res.Stderr))
	return nil
}

func trimNL(b []byte) string {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return string(b)
}

func lastLine(b []byte) string {
	s := trimNL(b)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return s[i+1:]
		}
	}
	return s
}
