package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/testenv"
	"github.com/fumehood/fumehood/mcpserver"
)

// TestStreamableHTTP serves the tools over streamable HTTP and calls them
// with the SDK's client.
func TestStreamableHTTP(t *testing.T) {
	py := testenv.PythonSessions(t)
	srv, err := mcpserver.New(py, &mcpserver.Options{MaxSessions: 1})
	require.NoError(t, err)
	defer srv.Close()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() }, nil))
	defer hs.Close()

	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL}, nil)
	require.NoError(t, err)
	defer cs.Close()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "6 * 7"}})
	require.NoError(t, err)
	assert.False(t, res.IsError)
	assert.Contains(t, res.Content[0].(*mcp.TextContent).Text, "value: 42")

	// Without a snapshot directory there are no snapshot tools.
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_snapshot", Arguments: map[string]any{"name": "x"}})
	assert.Error(t, err)

	// MaxSessions bounds the open sessions.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_create"})
	require.NoError(t, err)
	assert.False(t, res.IsError)
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_create"})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Contains(t, res.Content[0].(*mcp.TextContent).Text, "the most this server allows")
}
