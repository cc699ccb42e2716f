package mcpserver_test

import (
	"context"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/runtool"
	"github.com/fumehood/fumehood/mcpserver"
)

// TestSharesTheCodeToolDefinition: the server's instructions are the code
// tool's, and a run's result reads as codetool formats it for a model.
func TestSharesTheCodeToolDefinition(t *testing.T) {
	py := sandboxtest.Python(t)
	info, err := runtool.Probe(context.Background(), py)
	require.NoError(t, err)
	srv, err := mcpserver.New(py, nil)
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)
	assert.Contains(t, cs.InitializeResult().Instructions, runtool.InstructionsFor(info, nil, nil))

	res := call(t, cs, "run_python", map[string]any{"code": "print('hi')\nraise KeyError('k')"}, nil)
	assert.True(t, res.IsError)
	got := text(res)
	assert.Contains(t, got, "stdout:\nhi\nstderr:\nTraceback (most recent call last):\n")
	assert.Contains(t, got, "exception: KeyError: 'k'\n")
	assert.NotContains(t, got, "traceback:\n", "the traceback is in stderr already")
}
