// Command hostfunc exposes a Go function to sandboxed Python. The code
// calls fumehood.call("price", sku=..., quantity=...); the host decodes
// the keyword arguments into the function's argument type, runs it, and
// hands back its result as JSON. An error the Go function returns raises
// fumehood.CallError in Python, which the code can catch.
//
//	go run ./examples/hostfunc
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/fumehood/fumehood/hostcall"
	"github.com/fumehood/fumehood/sandbox"
)

// PriceArgs are price's keyword arguments in Python. An unknown or
// ill-typed one is refused before price is called.
type PriceArgs struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// Price is what Python gets back: a dict with these keys.
type Price struct {
	SKU      string `json:"sku"`
	Cents    int    `json:"cents"`
	Currency string `json:"currency"`
}

var catalog = map[string]int{"apple": 45, "pear": 60, "fig": 120}

var errUnknownSKU = errors.New("unknown SKU")

// price is an ordinary Go function: it could query a database or call an
// API with credentials the sandboxed code never sees. ctx ends with the
// run's deadline.
func price(ctx context.Context, a PriceArgs) (Price, error) {
	cents, ok := catalog[a.SKU]
	if !ok {
		return Price{}, fmt.Errorf("%w %q", errUnknownSKU, a.SKU)
	}
	if a.Quantity <= 0 {
		return Price{}, fmt.Errorf("quantity must be positive, not %d", a.Quantity)
	}
	return Price{SKU: a.SKU, Cents: cents * a.Quantity, Currency: "EUR"}, nil
}

// program is the untrusted code. fumehood is importable only in sandboxes
// with HostCalls (or a network policy).
const program = `
import fumehood

basket = {"apple": 3, "fig": 2, "durian": 1, "pear": 0}
total = 0
for sku, quantity in basket.items():
    try:
        p = fumehood.call("price", sku=sku, quantity=quantity)
    except fumehood.CallError as e:
        print(f"{sku}: refused ({e.kind}): {e.message}")
        continue
    print(f"{sku} x{quantity}: {p['cents']} {p['currency']} cents")
    total += p["cents"]
print("total:", total)

try:
    fumehood.call("price", sku="apple", quantity="three")
except fumehood.CallError as e:
    print("ill-typed:", e.kind)
try:
    fumehood.call("discount", sku="apple")
except fumehood.CallError as e:
    print("not exposed:", e.kind)
`

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

	sb, err := newSandbox(py)
	if err != nil {
		return err
	}
	defer sb.Close()

	res, err := sb.Run(ctx, program, &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 10 * time.Second}})
	if err != nil && res != nil {
		err = fmt.Errorf("%w\n%s", err, res.Stderr) // res is nil if the run never started
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s", res.Stdout)
	fmt.Fprintf(w, "(%d host calls)\n", res.HostCalls)
	return nil
}

// newSandbox makes a sandbox whose code may call price.
func newSandbox(py *sandbox.Guest) (*sandbox.Sandbox, error) {
	return py.NewSandbox(&sandbox.Config{
		HostCalls: &hostcall.Config{
			// The only functions the guest can call, by these names.
			Funcs: map[string]hostcall.Handler{"price": hostcall.Func(price)},
			// A bound on calls per run, against a runaway loop.
			MaxCalls: 100,
		},
		// Every call is logged; pass your application's logger. This
		// example keeps its output to the program's own.
		Logger: slog.New(slog.DiscardHandler),
	})
}
