package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

func TestHostFunc(t *testing.T) {
	sandboxtest.Built(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	assert.Equal(t, `apple x3: 135 EUR cents
fig x2: 240 EUR cents
durian: refused (error): unknown SKU "durian"
pear: refused (error): quantity must be positive, not 0
total: 375
ill-typed: arguments
not exposed: unknown
(6 host calls)
`, out.String())
}

// TestUncaughtCallError: an error from Go that the code does not catch
// ends the run like any Python exception.
func TestUncaughtCallError(t *testing.T) {
	sandboxtest.Built(t)
	sb, err := newSandbox(sandboxtest.Python(t))
	require.NoError(t, err)
	defer sb.Close()
	res, err := sb.Run(context.Background(), `import fumehood; fumehood.call("price", sku="kiwi", quantity=1)`, nil)
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "fumehood.CallError", exc.Type)
	assert.Equal(t, 1, res.ExitCode)
	assert.Contains(t, string(res.Stderr), "fumehood.CallError: unknown SKU \"kiwi\"\n")
	assert.Equal(t, 1, res.HostCalls)
}

func TestNoHostCallsNoModule(t *testing.T) {
	sandboxtest.Built(t)
	res, err := sandboxtest.Python(t).Run(context.Background(), "import fumehood", nil)
	require.Error(t, err)
	assert.Contains(t, string(res.Stderr), "ModuleNotFoundError: No module named 'fumehood'")
}
