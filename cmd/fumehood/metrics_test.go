package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// TestMCPMetrics: fumehood mcp --http serves Prometheus metrics at
// /metrics: runs by kind and stop, their time and fuel, the sessions open
// and hibernated, the clients, the memory held, and the process's.
func TestMCPMetrics(t *testing.T) {
	sandboxtest.Built(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() { done <- cmdMCP(ctx, []string{"--http", "127.0.0.1:0"}, nil, io.Discard, &stderr) }()
	waitFor(t, &stderr, "/metrics\n")
	base := regexp.MustCompile(`http://[0-9.:]+/`).FindString(stderr.String())
	require.NotEmpty(t, base, stderr.String())

	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base}, nil)
	require.NoError(t, err)
	defer cs.Close()
	for _, code := range []string{"print(1)", "while True: pass"} {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": code, "fuel": 100_000_000}})
		require.NoError(t, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_create", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.False(t, res.IsError)

	resp, err := http.Get(base + "metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := string(body)
	for _, want := range []string{
		`fumehood_runs_total{kind="session",stop="exit"} 1`,
		`fumehood_runs_total{kind="session",stop="fuel"} 1`,
		`fumehood_run_duration_seconds_count{kind="session"} 2`,
		"fumehood_sessions 1\n",
		"fumehood_sessions_hibernated 1\n",
		"fumehood_clients 1\n",
		"fumehood_runs_in_progress 0\n",
		"fumehood_memory_budget_bytes ",
		"process_resident_memory_bytes ",
		"go_goroutines ",
	} {
		assert.Contains(t, m, want)
	}
	assert.Regexp(t, `fumehood_memory_held_bytes [1-9]`, m)
	assert.Regexp(t, `fumehood_fuel_used_total\{kind="session"\} [1-9]`, m)
	cancel()
	<-done
}
