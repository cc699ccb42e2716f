package sandbox_test

import (
	"context"
	"errors"
	"fmt"
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
	defer py.Close(ctx)

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
	defer py.Close(ctx)

	res, err := py.Run(ctx, "raise ValueError('bad input')", nil)
	var exit *sandbox.ExitError
	if errors.As(err, &exit) {
		fmt.Println("exit status", exit.Code)
	}
	fmt.Printf("%s", res.Stderr[len(res.Stderr)-22:])
	// Output:
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
	defer py.Close(ctx)

	_, err = py.Run(ctx, "while True: pass", &sandbox.Config{Timeout: 100 * time.Millisecond})
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output: true
}
