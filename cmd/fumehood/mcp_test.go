package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mcpClient starts `fumehood mcp ARGS` as a subprocess (this test binary,
// acting as main) and connects the SDK's own client to it over stdio.
func mcpClient(t *testing.T, args ...string) *mcp.ClientSession {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), "FUMEHOOD_TEST_MAIN=1")
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and decodes its structured result into out.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, "a tool's failure is a result, not a protocol error")
	if out != nil && res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, out))
	}
	return res
}

type runOut struct {
	Stdout    string  `json:"stdout"`
	Stderr    string  `json:"stderr"`
	Value     *string `json:"value"`
	Exception *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"exception"`
	StoppedBy string `json:"stopped_by"`
	FuelUsed  int64  `json:"fuel_used"`
}

func text(res *mcp.CallToolResult) string {
	if len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

func TestMCPServer(t *testing.T) {
	needSessions(t)
	cs := mcpClient(t, "--timeout", "5s", "--snapshot-dir", t.TempDir())
	ctx := context.Background()

	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		assert.NotNil(t, tool.InputSchema, tool.Name)
	}
	sort.Strings(names)
	assert.Equal(t, []string{"run_python", "session_close", "session_create", "session_files", "session_restore", "session_run", "session_snapshot"}, names)

	var out runOut
	res := call(t, cs, "run_python", map[string]any{
		"code":  "import json\nprint(open('/work/in.json').read())\njson.loads(open('/work/in.json').read())['n'] * 2",
		"files": map[string]string{"/work/in.json": `{"n": 21}`},
	}, &out)
	assert.False(t, res.IsError, text(res))
	assert.Equal(t, "{\"n\": 21}\n", out.Stdout)
	require.NotNil(t, out.Value)
	assert.Equal(t, "42", *out.Value)
	assert.Positive(t, out.FuelUsed)
	assert.Contains(t, text(res), "value: 42")

	// A Python exception is an error result the model can read.
	out = runOut{}
	res = call(t, cs, "run_python", map[string]any{"code": "1/0"}, &out)
	assert.True(t, res.IsError)
	require.NotNil(t, out.Exception)
	assert.Equal(t, "ZeroDivisionError", out.Exception.Type)
	assert.Contains(t, text(res), "ZeroDivisionError")

	// A limit hit too.
	out = runOut{}
	res = call(t, cs, "run_python", map[string]any{"code": "while True: pass", "timeout_ms": 200}, &out)
	assert.True(t, res.IsError)
	assert.Equal(t, "deadline", out.StoppedBy)

	// A session across three calls, its files, a snapshot and a restore.
	var ref struct {
		SessionID string `json:"session_id"`
	}
	res = call(t, cs, "session_create", nil, &ref)
	require.False(t, res.IsError, text(res))
	require.NotEmpty(t, ref.SessionID)
	id := ref.SessionID
	call(t, cs, "session_run", map[string]any{"session_id": id, "code": "x = 40"}, nil)
	call(t, cs, "session_run", map[string]any{"session_id": id, "code": "x += 2\nopen('/work/out.txt', 'w').write(str(x))"}, nil)
	out = runOut{}
	res = call(t, cs, "session_run", map[string]any{"session_id": id, "code": "x"}, &out)
	require.False(t, res.IsError, text(res))
	assert.Equal(t, "42", *out.Value)

	var file struct {
		Content *string  `json:"content"`
		Entries []string `json:"entries"`
	}
	call(t, cs, "session_files", map[string]any{"session_id": id, "op": "read", "path": "/work/out.txt"}, &file)
	require.NotNil(t, file.Content)
	assert.Equal(t, "42", *file.Content)
	call(t, cs, "session_files", map[string]any{"session_id": id, "op": "write", "path": "/work/sub/new.txt", "content": "hello"}, nil)
	file.Entries = nil
	call(t, cs, "session_files", map[string]any{"session_id": id, "op": "list", "path": "/work"}, &file)
	assert.Equal(t, []string{"out.txt", "sub/"}, file.Entries)
	res = call(t, cs, "session_files", map[string]any{"session_id": id, "op": "delete", "path": "/work"}, nil)
	assert.True(t, res.IsError)

	res = call(t, cs, "session_snapshot", map[string]any{"session_id": id, "name": "answer"}, nil)
	require.False(t, res.IsError, text(res))
	res = call(t, cs, "session_snapshot", map[string]any{"session_id": id, "name": "../escape"}, nil)
	assert.True(t, res.IsError)
	res = call(t, cs, "session_close", map[string]any{"session_id": id}, nil)
	require.False(t, res.IsError, text(res))
	res = call(t, cs, "session_run", map[string]any{"session_id": id, "code": "x"}, nil)
	assert.True(t, res.IsError, "a closed session is gone")

	res = call(t, cs, "session_restore", map[string]any{"name": "answer"}, &ref)
	require.False(t, res.IsError, text(res))
	out = runOut{}
	call(t, cs, "session_run", map[string]any{"session_id": ref.SessionID, "code": "x * 2, open('/work/sub/new.txt').read()"}, &out)
	require.NotNil(t, out.Value)
	assert.Equal(t, "(84, 'hello')", *out.Value)
}
