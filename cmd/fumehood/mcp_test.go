package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// mcpClient starts `fumehood mcp ARGS` as a subprocess (this test binary,
// acting as main) and connects the SDK's own client to it over stdio.
func mcpClient(t *testing.T, args ...string) *mcp.ClientSession {
	t.Helper()
	sandboxtest.Built(t)
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

// runOut is a run's structured result; its texts are in the text content.
type runOut struct {
	Exception string `json:"exception"`
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
	assert.Equal(t, "stdout:\n{\"n\": 21}\nvalue: 42\n", text(res))
	assert.Positive(t, out.FuelUsed)

	// A Python exception is an error result the model can read.
	out = runOut{}
	res = call(t, cs, "run_python", map[string]any{"code": "1/0"}, &out)
	assert.True(t, res.IsError)
	assert.Equal(t, "ZeroDivisionError", out.Exception)
	assert.Contains(t, text(res), "exception: ZeroDivisionError: division by zero")

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
	res = call(t, cs, "session_run", map[string]any{"session_id": id, "code": "x"}, nil)
	require.False(t, res.IsError, text(res))
	assert.Equal(t, "value: 42\n", text(res))

	var file struct {
		Encoding string   `json:"encoding"`
		Entries  []string `json:"entries"`
	}
	res = call(t, cs, "session_files", map[string]any{"session_id": id, "op": "read", "path": "/work/out.txt"}, &file)
	assert.Equal(t, "42", text(res))
	assert.Equal(t, "utf-8", file.Encoding)
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
	res = call(t, cs, "session_run", map[string]any{"session_id": ref.SessionID, "code": "x * 2, open('/work/sub/new.txt').read()"}, nil)
	assert.Equal(t, "value: (84, 'hello')\n", text(res))
}

// TestMCPMounts: `fumehood mcp --mount --volume` puts the host
// directories in every sandbox and session, with run's flag syntax: a
// read-only mount refuses writes, a volume keeps them on the host, and the
// instructions name both.
func TestMCPMounts(t *testing.T) {
	in, vol := t.TempDir(), filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.WriteFile(filepath.Join(in, "data.txt"), []byte("from the host"), 0o644))
	cs := mcpClient(t, "--mount", in+":/in:ro", "--volume", vol+":/state")
	assert.Contains(t, cs.InitializeResult().Instructions, "host directories are mounted at /in (read-only), /state (read-write)")

	res := call(t, cs, "run_python", map[string]any{"code": "open('/in/data.txt').read()"}, nil)
	assert.Equal(t, "value: 'from the host'\n", text(res))
	res = call(t, cs, "run_python", map[string]any{"code": "open('/in/new.txt', 'w')"}, nil)
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), "Read-only file system")
	var ref struct {
		SessionID string `json:"session_id"`
	}
	res = call(t, cs, "session_create", nil, &ref)
	require.False(t, res.IsError, text(res))
	res = call(t, cs, "session_run", map[string]any{"session_id": ref.SessionID,
		"code": "open('/state/n.txt', 'w').write(open('/in/data.txt').read().upper())"}, nil)
	require.False(t, res.IsError, text(res))
	b, err := os.ReadFile(filepath.Join(vol, "n.txt"))
	require.NoError(t, err)
	assert.Equal(t, "FROM THE HOST", string(b))
	_, err = os.Stat(filepath.Join(in, "new.txt"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestMCPStdioMalformedLine feeds `fumehood mcp` a garbage line on its
// stdin, then valid requests: the garbage gets a JSON-RPC parse error
// (-32700) and the requests their answers. The garbage used to end the
// server (exit 125) and every session with it.
func TestMCPStdioMalformedLine(t *testing.T) {
	sandboxtest.Built(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := cmdMCP(ctx, []string{"--max-output", "1KiB"}, inR, outW, io.Discard)
		// Neither side waits forever on a server that ended.
		outW.CloseWithError(fmt.Errorf("fumehood mcp ended: %v", err))
		inR.CloseWithError(fmt.Errorf("fumehood mcp ended: %v", err))
		done <- err
	}()
	lines := bufio.NewScanner(outR)
	lines.Buffer(nil, 1<<20)
	send := func(line string) {
		t.Helper()
		_, err := inW.Write([]byte(line + "\n"))
		require.NoError(t, err)
	}
	next := func() map[string]any {
		t.Helper()
		require.True(t, lines.Scan(), "the server wrote nothing more: %v", lines.Err())
		var m map[string]any
		require.NoError(t, json.Unmarshal(lines.Bytes(), &m), lines.Text())
		return m
	}

	send("}{ not JSON")
	m := next()
	assert.Nil(t, m["id"])
	require.Contains(t, m, "error", "%v", m)
	assert.Equal(t, -32700.0, m["error"].(map[string]any)["code"])

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	m = next()
	assert.Equal(t, 1.0, m["id"])
	assert.Contains(t, m, "result", "%v", m)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"session_create","arguments":{}}}`)
	m = next()
	assert.Equal(t, 2.0, m["id"])
	sc := m["result"].(map[string]any)["structuredContent"].(map[string]any)
	id, _ := sc["session_id"].(string)
	require.NotEmpty(t, id, "%v", m)
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"session_run","arguments":{"session_id":"` + id + `","code":"x = 42"}}}`)
	assert.Equal(t, 3.0, next()["id"])

	send("\x00\x01 garbage again")
	assert.Equal(t, -32700.0, next()["error"].(map[string]any)["code"])
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"session_run","arguments":{"session_id":"` + id + `","code":"x"}}}`)
	m = next()
	assert.Equal(t, 4.0, m["id"])
	assert.Contains(t, fmt.Sprint(m["result"]), "value: 42", "the session outlived the garbage")

	require.NoError(t, inW.Close())
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("fumehood mcp did not end with its input")
	}
}

func TestMCPFlags(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--memory-budget", "lots"},
		{"--memory-budget", "0"},
		{"--max-runs", "-1"},
		{"--idle-timeout", "-1s"},
		{"--max-clients", "0"},
		{"--max-sessions-per-client", "0"},
		{"--max-stored-sessions-per-client", "-1"},
		{"--max-waiting-runs", "0"},
		{"--max-waiting-runs-per-client", "0"},
		{"--mount", dir + ":/m:RO"},
		{"--mount", dir + ":/m:readonly"},
		{"--mount", dir + ":relative"},
		{"--mount", filepath.Join(dir, "missing") + ":/x"},
		{"--volume", dir + ":/v:ro"},
	} {
		err := cmdMCP(context.Background(), args, strings.NewReader(""), io.Discard, io.Discard)
		var ue *usageError
		assert.ErrorAs(t, err, &ue, "%v", args)
	}
}
