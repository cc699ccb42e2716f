package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/examples/agents"
)

// modelCode is the code the recorded model asks the tool to run.
const modelCode = `import csv
totals = {}
with open("/work/orders.csv") as f:
    for o in csv.DictReader(f):
        totals[o["customer"]] = totals.get(o["customer"], 0) + float(o["amount"])
best = max(totals, key=totals.get)
bars = "".join(f'<rect x="{10 + 60 * i}" y="{110 - v * 2:.0f}" width="40" height="{v * 2:.0f}"/>'
               for i, v in enumerate(totals.values()))
open("/work/chart.svg", "w").write(f'<svg xmlns="http://www.w3.org/2000/svg" width="200" height="130">{bars}</svg>')
print(f"{best} spent {totals[best]:.2f}")
totals`

const finalAnswer = "ada spent the most: 43.75 (grace 43.00, linus 7.10). The bar chart is in /work/chart.svg."

// fakeResponses answers POST /responses as the Responses API does, in the
// shape of recorded responses: the first request gets a function call of
// the code tool, the second (which must carry that call's output, with the
// expected result) the final answer. Anything else is a 400, as the API
// answers a bad request.
func fakeResponses(t *testing.T) *httptest.Server {
	description, err := agents.ToolDescription(context.Background())
	require.NoError(t, err)
	var mu sync.Mutex
	turn := 0
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Model              string          `json:"model"`
			PreviousResponseID string          `json:"previous_response_id"`
			Input              json.RawMessage `json:"input"`
			Tools              []struct {
				Type, Name, Description string
				Parameters              map[string]any
			} `json:"tools"`
		}
		if r.Method != http.MethodPost || r.URL.Path != "/responses" || json.Unmarshal(body, &req) != nil {
			apiError(w, fmt.Sprintf("unexpected %s %s: %s", r.Method, r.URL.Path, body))
			return
		}
		if len(req.Tools) != 1 || req.Tools[0].Type != "function" || req.Tools[0].Name != codetool.Name ||
			req.Tools[0].Description != description || req.Tools[0].Parameters["type"] != "object" {
			apiError(w, "the request does not declare the code tool: "+string(body))
			return
		}
		turn++
		switch turn {
		case 1:
			var question string
			if json.Unmarshal(req.Input, &question) != nil || question != agents.Task {
				apiError(w, "the first request is not the task: "+string(req.Input))
				return
			}
			args, _ := json.Marshal(map[string]string{"code": modelCode})
			reply(w, map[string]any{
				"id": "resp_001", "object": "response", "created_at": 1764750000, "status": "completed", "model": req.Model,
				"output": []any{map[string]any{
					"type": "function_call", "id": "fc_001", "call_id": "call_001", "name": codetool.Name,
					"arguments": string(args), "status": "completed",
				}},
				"parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{},
				"usage": map[string]any{"input_tokens": 412, "output_tokens": 131, "total_tokens": 543},
			})
		case 2:
			var items []struct {
				Type   string `json:"type"`
				CallID string `json:"call_id"`
				Output []struct {
					Type, Text string
				} `json:"output"`
			}
			if req.PreviousResponseID != "resp_001" || json.Unmarshal(req.Input, &items) != nil || len(items) != 1 ||
				items[0].Type != "function_call_output" || items[0].CallID != "call_001" || len(items[0].Output) != 2 {
				apiError(w, "the second request does not carry the tool's output: "+string(body))
				return
			}
			text, svg := items[0].Output[0].Text, items[0].Output[1].Text
			if !strings.Contains(text, "stdout:\nada spent 43.75\n") || !strings.Contains(text, "value: {'ada': 43.75, 'grace': 43.0, 'linus': 7.1}") ||
				!strings.Contains(text, "/work/chart.svg (") || !strings.HasPrefix(svg, "/work/chart.svg:\n<svg ") {
				apiError(w, "the tool's output is not the expected result: "+string(body))
				return
			}
			reply(w, map[string]any{
				"id": "resp_002", "object": "response", "created_at": 1764750003, "status": "completed", "model": req.Model,
				"previous_response_id": "resp_001",
				"output": []any{map[string]any{
					"type": "message", "id": "msg_002", "role": "assistant", "status": "completed",
					"content": []any{map[string]any{"type": "output_text", "text": finalAnswer, "annotations": []any{}}},
				}},
				"parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{},
				"usage": map[string]any{"input_tokens": 690, "output_tokens": 27, "total_tokens": 717},
			})
		default:
			apiError(w, "more requests than the recorded conversation has")
		}
	}))
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
}

// TestToolLoop runs the example's loop with the SDK's client against the
// fake API: the model's call runs in the sandbox, its result goes back,
// and the model's answer comes out.
func TestToolLoop(t *testing.T) {
	srv := fakeResponses(t)
	defer srv.Close()
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/"), option.WithAPIKey("test"), option.WithMaxRetries(0))

	var transcript bytes.Buffer
	answer, err := run(context.Background(), client, openai.ChatModelGPT5_2, agents.Task, &transcript)
	t.Logf("transcript:\n%s", transcript.String())
	require.NoError(t, err)
	assert.Equal(t, finalAnswer, answer)
	assert.Contains(t, transcript.String(), "tool result (is_error=false):\n    stdout:\n    ada spent 43.75\n")
	assert.Contains(t, transcript.String(), "    files:\n      /work/chart.svg (")
}

// TestToolLoopBadArguments: a model that sends arguments the tool refuses
// gets a tool result saying what was wrong; the loop goes on.
func TestToolLoopBadArguments(t *testing.T) {
	var second string
	turn := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		turn++
		if turn == 1 {
			reply(w, map[string]any{"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "m",
				"output": []any{map[string]any{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": codetool.Name,
					"arguments": `{"code": "print(1)", "memory_limit": "64GB"}`, "status": "completed"}}})
			return
		}
		second = string(body)
		reply(w, map[string]any{"id": "resp_2", "object": "response", "created_at": 2, "status": "completed", "model": "m",
			"output": []any{map[string]any{"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": "sorry", "annotations": []any{}}}}}})
	}))
	defer srv.Close()
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	var transcript bytes.Buffer
	answer, err := run(context.Background(), client, "m", "hi", &transcript)
	t.Logf("transcript:\n%s", transcript.String())
	require.NoError(t, err)
	assert.Equal(t, "sorry", answer)
	assert.Contains(t, second, `codetool: bad arguments: `)
	assert.Contains(t, transcript.String(), "tool result (is_error=true):\n    error: codetool: bad arguments: ")
}
