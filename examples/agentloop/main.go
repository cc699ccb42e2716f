// Command agentloop is the loop an agent framework runs around a sandbox:
// the model writes code, the sandbox runs it, the outcome (output, or the
// Python exception with its traceback) goes back to the model, which tries
// again until the code works.
//
// The "model" here is scripted: a fixed list of attempts, each expecting
// the error the previous one made. A real framework sends the feedback to
// an LLM instead. The attempts run in one session, so what one defines
// (the parsed orders) is there for the next, as in a notebook.
//
//	go run ./examples/agentloop
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

// task is what the user asked the agent.
const task = "Which customer spent the most in /work/orders.csv?"

const ordersCSV = `order,customer,amount
1,ada,12.50
2,grace,40.00
3,ada,31.25
4,linus,7.10
5,grace,3.00
`

// attempt is one scripted answer of the model: the code it writes once it
// has read feedback containing after (empty for its first answer).
type attempt struct {
	after string
	code  string
}

// script is the model's side of the conversation.
var script = []attempt{
	{"", `
import csv
with open("/work/orders.csv") as f:
    orders = list(csv.DictReader(f))
totals = {}
for o in orders:
    totals[o["customer"]] = totals.get(o["customer"], 0) + o["amount"]
`},
	// The TypeError says the amounts are strings. orders survived the
	// error, so the fix need not read the file again.
	{"TypeError", `
totals = {}
for o in orders:
    totals[o["customer"]] = totals.get(o["customer"], 0) + float(o["Amount"])
`},
	{"KeyError: 'Amount'", `
totals = {}
for o in orders:
    totals[o["customer"]] = totals.get(o["customer"], 0) + float(o["amount"])
best = max(totals, key=totals.get)
print(f"{best} spent {totals[best]:.2f}")
best
`},
}

// model is a scripted stand-in for an LLM.
type model struct{ turn int }

// next returns the model's next code, given the feedback on its last, or
// an error when it has nothing to say to that feedback.
func (m *model) next(feedback string) (string, error) {
	if m.turn >= len(script) {
		return "", errors.New("the model gave up")
	}
	a := script[m.turn]
	if !strings.Contains(feedback, a.after) {
		return "", fmt.Errorf("the model has no answer to:\n%s", feedback)
	}
	m.turn++
	return strings.TrimSpace(a.code), nil
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	// The guest, built once per machine (`fumehood guest build`); its
	// sessions and one-shot runs start from the same images.
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		return err
	}
	defer py.Close()

	s, err := py.NewSession(ctx, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	// The task's data, uploaded into the session's in-memory filesystem.
	if err := s.Files().WriteFile("/work/orders.csv", []byte(ordersCSV)); err != nil {
		return err
	}

	fmt.Fprintf(w, "user: %s\n", task)
	// Each attempt is untrusted code: give it a small budget.
	limits := &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 5 * time.Second, Fuel: 2_000_000_000, MaxOutput: 16 << 10}}
	m := &model{}
	feedback := ""
	for {
		code, err := m.next(feedback)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\nmodel, attempt %d:\n%s\n", m.turn, indent(code))
		res, err := s.Run(ctx, code, limits)
		if err == nil {
			fmt.Fprintf(w, "sandbox: ok\n%s", indent(string(res.Stdout)))
			fmt.Fprintf(w, "answer: %s\n", res.Value)
			return nil
		}
		var exc *sandbox.Exception
		switch {
		case errors.As(err, &exc):
			// The session goes on as the code left it: orders stays defined.
			// The traceback is what the model needs to fix its code.
			fmt.Fprintf(w, "sandbox: %s: %s\n", exc.Type, exc.Message)
			feedback = exc.Traceback
		case res != nil:
			// sys.exit, or a limit (deadline, fuel, memory, output) that
			// stopped the run and rolled the session back to before it.
			fmt.Fprintf(w, "sandbox: %v\n", err)
			feedback = err.Error()
		default:
			return err // the host failed, not the code
		}
	}
}

// indent indents each line of s for the transcript.
func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}
