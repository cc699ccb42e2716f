package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/fumehood/fumehood/hostcall"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

func ExampleCompilePython() {
	ctx := context.Background()
	py, err := sandbox.CompilePython(ctx, nil) // compile once
	if err != nil {
		fmt.Println(err)
		return
	}
	defer py.Close()

	res, err := py.Run(ctx, "print(sum(range(10)))", nil) // run many times
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s", res.Stdout)
	// Output: 45
}

func ExampleGuest_Run_exception() {
	ctx := context.Background()
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer py.Close()

	res, err := py.Run(ctx, "raise ValueError('bad input')", nil)
	var exc *sandbox.Exception
	if errors.As(err, &exc) {
		fmt.Println(exc.Type, exc.Message)
	}
	fmt.Println("exit status", res.ExitCode)
	fmt.Printf("%s", res.Stderr[len(res.Stderr)-22:]) // the traceback, as python prints it
	// Output:
	// ValueError bad input
	// exit status 1
	// ValueError: bad input
}

func ExampleGuest_Run_timeout() {
	ctx := context.Background()
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer py.Close()

	_, err = py.Run(ctx, "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 100 * time.Millisecond}})
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output: true
}

func ExampleGuest_NewSession() {
	ctx := context.Background()
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer py.Close()

	s, err := py.NewSession(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	s.Run(ctx, "x = 41", nil)
	res, _ := s.Run(ctx, "x + 1", nil)
	fmt.Println(res.Value)

	_, err = s.Run(ctx, "x / 0", nil)
	var exc *sandbox.Exception
	if errors.As(err, &exc) {
		fmt.Println(exc.Type, "-", exc.Message)
	}

	// Output:
	// 42
	// ZeroDivisionError - division by zero
}

func ExampleFiles() {
	ctx := context.Background()
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer py.Close()
	sb, err := py.NewSandbox(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close()
	files := sb.Files()

	// Give the code its input, at an absolute guest path.
	if err := files.MkdirAll("/work/in"); err != nil {
		fmt.Println(err)
		return
	}
	if err := files.WriteFile("/work/in/orders.csv", []byte("item,qty\napple,3\npear,5\n")); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := sb.Run(ctx, `
import csv, os
rows = list(csv.DictReader(open("/work/in/orders.csv")))
os.makedirs("/work/out")
open("/work/out/total.txt", "w").write(str(sum(int(r["qty"]) for r in rows)))
`, nil); err != nil {
		fmt.Println(err)
		return
	}

	// Read what it wrote.
	total, err := files.ReadFile("/work/out/total.txt")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("total:", string(total))

	// Or only the start of a file, holding no more of it than that,
	// however large the guest's code made it.
	head, more, err := files.ReadFileLimit("/work/in/orders.csv", 9)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%q, more: %v\n", head, more)

	// FS is the same files as an io/fs file system, whose names are
	// relative to the guest's "/".
	_ = fs.WalkDir(files.FS(), "work", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			fmt.Println(p)
		}
		return nil
	})
	// Output:
	// total: 8
	// "item,qty\n", more: true
	// work/in/orders.csv
	// work/out/total.txt
}

func ExampleLimits() {
	ctx := context.Background()
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer py.Close()

	// The sandbox's Limits are a ceiling: a run may ask for less, never more.
	sb, err := py.NewSandbox(&sandbox.Config{Limits: sandbox.Limits{
		Timeout: 10 * time.Second,
		Fuel:    2_000_000_000, // WebAssembly instructions: a deterministic CPU budget
		Memory:  128 << 20,
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close()

	res, err := sb.Run(ctx, "while True: pass", &sandbox.RunOptions{
		Limits: sandbox.Limits{Fuel: 50_000_000, Timeout: time.Hour}, // the hour is not granted
	})
	fmt.Println(errors.Is(err, sandbox.ErrFuelExhausted), res.Stop, res.Stop.Limit())
	fmt.Println(res.FuelUsed >= 50_000_000)
	// Output:
	// true fuel true
	// true
}

func ExampleSession_Snapshot() {
	ctx := context.Background()
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer py.Close()

	s, err := py.NewSession(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Run(ctx, "import json\nstate = {'step': 1}", nil)

	// Pause the interpreter to bytes (a file, a database row, a request
	// body) and close it; nothing of it stays in this process.
	var snap bytes.Buffer
	if err := s.Snapshot(&snap); err != nil {
		fmt.Println(err)
		return
	}
	s.Close()

	// Later, here or in another process with the same guest: resume.
	r, err := py.ResumeSession(ctx, &snap, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	res, _ := r.Run(ctx, "state['step'] += 1\njson.dumps(state)", nil)
	fmt.Println(res.Value)
	// Output: '{"step": 2}'
}

func ExampleSession_Fork() {
	ctx := context.Background()
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer py.Close()

	s, err := py.NewSession(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	s.Run(ctx, "plan = ['fetch']", nil)

	// A fork is an independent copy: try two continuations from one state.
	f, err := s.Fork(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	f.Run(ctx, "plan.append('retry')", nil)
	s.Run(ctx, "plan.append('give up')", nil)

	a, _ := s.Run(ctx, "plan", nil)
	b, _ := f.Run(ctx, "plan", nil)
	fmt.Println(a.Value)
	fmt.Println(b.Value)
	// Output:
	// ['fetch', 'give up']
	// ['fetch', 'retry']
}

func ExampleConfig_hostCalls() {
	ctx := context.Background()
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer py.Close()

	// Guest code may call these Go functions, and nothing else of the host.
	type args struct{ City string }
	sb, err := py.NewSandbox(&sandbox.Config{HostCalls: &hostcall.Config{Funcs: map[string]hostcall.Handler{
		"temperature": hostcall.Func(func(ctx context.Context, a args) (float64, error) {
			if a.City != "Paris" {
				return 0, fmt.Errorf("no station in %q", a.City)
			}
			return 21.5, nil
		}),
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close()

	res, err := sb.Run(ctx, `
import fumehood
print(fumehood.call("temperature", City="Paris"))
try:
    fumehood.call("temperature", City="Oslo")
except fumehood.CallError as e:
    print(e)
`, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s", res.Stdout)
	fmt.Println("calls:", res.HostCalls)
	// Output:
	// 21.5
	// no station in "Oslo"
	// calls: 2
}

// TestMain skips the examples when the Python guest is not built (an
// example cannot skip itself); see sandboxtest.Main.
func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m)) }
