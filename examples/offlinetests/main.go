// Command offlinetests checks generated code against test cases, as a test
// suite or an agent's evaluation harness does with code an LLM wrote. The
// code runs in a sandbox: no network, no host files, a CPU budget, and
// deterministic clocks and randomness, so a check gives the same answer on
// every machine and every run, inside go test.
//
// main prints a report for two "generated" candidates; main_test.go is the
// same check written as Go tests, which is the usual way to use it.
//
//	go run ./examples/offlinetests
//	go test ./examples/offlinetests -v
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

// Two answers a model might give to "write slugify(title) -> str".
const (
	naiveSlugify = `
def slugify(title):
    return title.lower().replace(" ", "-")
`
	goodSlugify = `
import re
import unicodedata

def slugify(title):
    ascii = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii.lower()).strip("-")
`
)

// Case is one test case: the function's arguments and the result wanted.
type Case struct {
	Name string
	Args []any
	Want any
}

// slugifyCases specify slugify.
var slugifyCases = []Case{
	{"words", []any{"Hello World"}, "hello-world"},
	{"punctuation", []any{"Hello, World!"}, "hello-world"},
	{"spaces", []any{"  many   spaces  "}, "many-spaces"},
	{"accents", []any{"Crème Brûlée"}, "creme-brulee"},
	{"slug", []any{"already-a-slug"}, "already-a-slug"},
	{"empty", []any{""}, ""},
}

// Outcome is what the function did with one case: its result, as JSON, or
// the exception it raised.
type Outcome struct {
	Got   json.RawMessage `json:"got"`
	Error string          `json:"error"`
}

// harness runs in the sandbox: it imports the generated module, calls the
// function with each case's arguments (read from stdin) and writes the
// outcomes to a file, so that what the generated code prints cannot be
// taken for a result.
//
//go:embed harness.py
var harness string

// limits bound a whole check. Deterministic: the clocks advance with the
// work done and randomness has a fixed seed, so a flaky function fails the
// same way every time, and the fuel used is the same on every machine.
var limits = sandbox.Config{
	Limits:        sandbox.Limits{Timeout: 10 * time.Second, Fuel: 2_000_000_000, Memory: 128 << 20},
	Deterministic: true,
	Seed:          1,
}

// check runs the function name defined by source against cases, all in
// one run of a fresh sandbox, and returns an outcome for each case. An
// error means the code could not be checked at all: it does not compile,
// it lacks the function, or it ran out of a limit.
func check(ctx context.Context, py *sandbox.Guest, source, name string, cases []Case) ([]Outcome, error) {
	sb, err := py.NewSandbox(&limits)
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	if err := sb.Files().WriteFile("/work/generated.py", []byte(source)); err != nil {
		return nil, err
	}
	args := make([][]any, len(cases))
	for i, c := range cases {
		args[i] = c.Args
	}
	input, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	res, err := sb.Run(ctx, harness, &sandbox.RunOptions{Stdin: bytes.NewReader(input)}, name)
	if err != nil && res != nil {
		err = fmt.Errorf("%w\n%s", err, res.Stderr) // res is nil if the run never started
	}
	if err != nil {
		return nil, err
	}
	data, err := sb.Files().ReadFile("/work/outcomes.json")
	if err != nil {
		return nil, err
	}
	var outs []Outcome
	if err := json.Unmarshal(data, &outs); err != nil {
		return nil, err
	}
	if len(outs) != len(cases) {
		return nil, fmt.Errorf("%d outcomes for %d cases", len(outs), len(cases))
	}
	return outs, nil
}

// passed reports whether an outcome is the result a case wants.
func passed(c Case, o Outcome) bool {
	if o.Error != "" {
		return false
	}
	want, err := json.Marshal(c.Want)
	if err != nil {
		return false
	}
	var got any
	if json.Unmarshal(o.Got, &got) != nil {
		return false
	}
	norm, _ := json.Marshal(got) // the harness's spacing aside
	return string(norm) == string(want)
}

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

	for _, cand := range []struct{ name, source string }{{"naive", naiveSlugify}, {"good", goodSlugify}} {
		outs, err := check(ctx, py, cand.source, "slugify", slugifyCases)
		if err != nil {
			return fmt.Errorf("candidate %s: %w", cand.name, err)
		}
		ok := 0
		for i, c := range slugifyCases {
			if passed(c, outs[i]) {
				ok++
				continue
			}
			got := string(outs[i].Got)
			if outs[i].Error != "" {
				got = outs[i].Error
			}
			fmt.Fprintf(w, "%s: FAIL %s: slugify(%q) = %s, want %q\n", cand.name, c.Name, c.Args[0], got, c.Want)
		}
		fmt.Fprintf(w, "%s: %d of %d cases pass\n", cand.name, ok, len(slugifyCases))
	}
	return nil
}
