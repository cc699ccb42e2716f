package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/fumehood/fumehood/sandbox"
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
	py, err := sandbox.CompilePython(ctx, &sandbox.Options{Sessions: true})
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

	// Pause to bytes, resume (here or in another process), fork.
	var snap bytes.Buffer
	if err := s.Snapshot(&snap); err != nil {
		fmt.Println(err)
		return
	}
	r, err := py.ResumeSession(ctx, &snap, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	res, _ = r.Run(ctx, "x * 2", nil)
	fmt.Println(res.Value)
	// Output:
	// 42
	// ZeroDivisionError - division by zero
	// 82
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
	// work/in/orders.csv
	// work/out/total.txt
}
