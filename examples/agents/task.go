package agents

import (
	"context"
	"time"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/sandbox"
)

// Limits are the code tool's limits in both examples: its description
// tells the model them.
var Limits = sandbox.Limits{Timeout: 10 * time.Second, MaxOutput: 32 << 10}

// Task is what the user asks the agent in both examples.
const Task = "Which customer spent the most in /work/orders.csv? Draw a bar chart of the totals."

// OrdersCSV is the data the task is about.
const OrdersCSV = `order,customer,amount
1,ada,12.50
2,grace,40.00
3,ada,31.25
4,linus,7.10
5,grace,3.00
`

// Setup uploads the task's data into a conversation's new session: the
// codetool.Options.Setup of both examples.
func Setup(ctx context.Context, conversation string, s *sandbox.Session) error {
	return s.Files().WriteFile("/work/orders.csv", []byte(OrdersCSV))
}

// Shown is a tool call's arguments for a transcript: the code, when they
// parse, else the arguments as the model wrote them.
func Shown(arguments string) string {
	if in, err := codetool.ParseInput([]byte(arguments), codetool.DefaultMaxCode); err == nil {
		return in.Code
	}
	return arguments
}

// ToolDescription is the description both examples give the model: the
// code tool's, for the guest sandbox.CompilePython loads. The fake API servers of the
// examples' tests check that a request carries it.
func ToolDescription(ctx context.Context) (string, error) {
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		return "", err
	}
	defer py.Close()
	tool, err := codetool.New(py, &codetool.Options{Limits: Limits})
	if err != nil {
		return "", err
	}
	defer tool.Close()
	return tool.Description(), nil
}
