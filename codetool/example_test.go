package codetool_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// A model's tool calls, as any SDK hands them over: a conversation ID and
// the arguments' JSON. The result's Text goes back as the tool result.
func Example() {
	ctx := context.Background()
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer py.Close()
	tool, err := codetool.New(py, &codetool.Options{Limits: sandbox.Limits{Timeout: 10 * time.Second}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tool.Close()

	for _, args := range []string{
		`{"code": "import statistics\nxs = [3, 1, 4, 1, 5]\nprint(len(xs))"}`,
		`{"code": "statistics.mean(xs)"}`, // the session remembers xs
		`{"code": "raise ValueError('no such file')"}`,
		`{"code": "1", "memory": "64GB"}`,
	} {
		res := tool.Call(ctx, "conversation-1", []byte(args))
		fmt.Printf("is_error=%v\n%s", res.IsError, res.Text())
	}
	// Output:
	// is_error=false
	// stdout:
	// 5
	// is_error=false
	// value: 2.8
	// is_error=true
	// stderr:
	// Traceback (most recent call last):
	//   File "<run-3>", line 1, in <module>
	//     raise ValueError('no such file')
	// ValueError: no such file
	// exception: ValueError: no such file
	// is_error=true
	// error: codetool: bad arguments: the arguments are not {"code": "<python>", "timeout_ms": <optional integer>}: unknown field "memory"
}

// TestMain skips the examples when the Python guest is not built (an
// example cannot skip itself); see sandboxtest.Main.
func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m)) }
