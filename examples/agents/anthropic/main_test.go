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

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/examples/agents"
)

// modelCode is the code the recorded model asks the tool to run: it draws
// the chart as a PNG (zlib and struct are in the standard library).
const modelCode = `import csv, struct, zlib
totals = {}
with open("/work/orders.csv") as f:
    for o in csv.DictReader(f):
        totals[o["customer"]] = totals.get(o["customer"], 0) + float(o["amount"])
best = max(totals, key=totals.get)

def png(width, height, pixel):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"".join(pixel(x, y) for x in range(width)) for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))

values = list(totals.values())
def bar(x, y):
    i = x // 40
    return b"\x33\x66\xcc" if x % 40 < 30 and i < len(values) and 100 - y <= values[i] * 2 else b"\xff\xff\xff"
open("/work/chart.png", "wb").write(png(120, 100, bar))
print(f"{best} spent {totals[best]:.2f}")
totals`

const finalAnswer = "ada spent the most, 43.75, just ahead of grace (43.00); linus spent 7.10. The chart is /work/chart.png."

// fakeMessages answers POST /v1/messages as the Messages API does, in the
// shape of recorded responses: the first request gets a tool_use of the
// code tool, the second (which must carry its tool_result, with the
// expected output and the chart as a PNG image block) the final answer.
// Anything else is a 400, as the API answers a bad request.
func fakeMessages(t *testing.T) *httptest.Server {
	description, err := agents.ToolDescription(context.Background())
	require.NoError(t, err)
	var mu sync.Mutex
	turn := 0
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string            `json:"role"`
				Content []json.RawMessage `json:"content"`
			} `json:"messages"`
			Tools []struct {
				Name, Description string
				InputSchema       map[string]any `json:"input_schema"`
			} `json:"tools"`
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" || json.Unmarshal(body, &req) != nil {
			apiError(w, fmt.Sprintf("unexpected %s %s: %s", r.Method, r.URL.Path, body))
			return
		}
		if len(req.Tools) != 1 || req.Tools[0].Name != codetool.Name || req.Tools[0].Description != description ||
			req.Tools[0].InputSchema["type"] != "object" || req.Tools[0].InputSchema["additionalProperties"] != false {
			apiError(w, "the request does not declare the code tool: "+string(body))
			return
		}
		turn++
		switch turn {
		case 1:
			if len(req.Messages) != 1 || !strings.Contains(string(req.Messages[0].Content[0]), agents.Task) {
				apiError(w, "the first request is not the task: "+string(body))
				return
			}
			reply(w, map[string]any{
				"id": "msg_01", "type": "message", "role": "assistant", "model": req.Model,
				"content": []any{
					map[string]any{"type": "text", "text": "I'll total the orders per customer and draw a chart."},
					map[string]any{"type": "tool_use", "id": "toolu_01", "name": codetool.Name, "input": map[string]any{"code": modelCode}},
				},
				"stop_reason": "tool_use", "stop_sequence": nil,
				"usage": map[string]any{"input_tokens": 1024, "output_tokens": 310},
			})
		case 2:
			var result struct {
				Type      string `json:"type"`
				ToolUseID string `json:"tool_use_id"`
				IsError   bool   `json:"is_error"`
				Content   []struct {
					Type   string `json:"type"`
					Text   string `json:"text"`
					Source struct {
						Type      string `json:"type"`
						MediaType string `json:"media_type"`
						Data      string `json:"data"`
					} `json:"source"`
				} `json:"content"`
			}
			if len(req.Messages) != 3 || req.Messages[1].Role != "assistant" || req.Messages[2].Role != "user" ||
				json.Unmarshal(req.Messages[2].Content[0], &result) != nil || result.Type != "tool_result" ||
				result.ToolUseID != "toolu_01" || result.IsError || len(result.Content) != 2 {
				apiError(w, "the second request does not carry the tool result: "+string(body))
				return
			}
			text, img := result.Content[0], result.Content[1]
			if !strings.Contains(text.Text, "stdout:\nada spent 43.75\n") || !strings.Contains(text.Text, "/work/chart.png (") ||
				img.Type != "image" || img.Source.Type != "base64" || img.Source.MediaType != "image/png" ||
				!strings.HasPrefix(img.Source.Data, "iVBORw0KGgo") {
				apiError(w, "the tool result is not the expected output: "+string(body))
				return
			}
			reply(w, map[string]any{
				"id": "msg_02", "type": "message", "role": "assistant", "model": req.Model,
				"content":     []any{map[string]any{"type": "text", "text": finalAnswer}},
				"stop_reason": "end_turn", "stop_sequence": nil,
				"usage": map[string]any{"input_tokens": 1790, "output_tokens": 41},
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
	json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": msg}})
}

// TestToolLoop runs the example's loop with the SDK's client against the
// fake API: the model's tool_use runs in the sandbox, its tool_result
// (text and the chart as an image) goes back, and the answer comes out.
func TestToolLoop(t *testing.T) {
	srv := fakeMessages(t)
	defer srv.Close()
	client := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("test"), option.WithMaxRetries(0))

	var transcript bytes.Buffer
	answer, err := run(context.Background(), client, anthropic.ModelClaudeSonnet5_5, agents.Task, &transcript)
	t.Logf("transcript:\n%s", transcript.String())
	require.NoError(t, err)
	assert.Equal(t, finalAnswer, answer)
	assert.Contains(t, transcript.String(), "tool result (is_error=false):\n    stdout:\n    ada spent 43.75\n")
	assert.Contains(t, transcript.String(), "image/png, attached)")
}

// TestToolLoopException: code that raises comes back as an error
// tool_result with the exception, and the loop goes on.
func TestToolLoopException(t *testing.T) {
	var second string
	turn := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		turn++
		if turn == 1 {
			reply(w, map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
				"content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": codetool.Name,
					"input": map[string]any{"code": "import csv\nrows = list(csv.DictReader(open('/work/orders.csv')))\nsum(r['Amount'] for r in rows)"}}},
				"usage": map[string]any{"input_tokens": 1, "output_tokens": 1}})
			return
		}
		second = string(body)
		reply(w, map[string]any{"id": "msg_2", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
			"content": []any{map[string]any{"type": "text", "text": "The column is 'amount'."}},
			"usage":   map[string]any{"input_tokens": 1, "output_tokens": 1}})
	}))
	defer srv.Close()
	client := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("test"), option.WithMaxRetries(0))
	var transcript bytes.Buffer
	answer, err := run(context.Background(), client, "m", "sum the amounts", &transcript)
	t.Logf("transcript:\n%s", transcript.String())
	require.NoError(t, err)
	assert.Equal(t, "The column is 'amount'.", answer)
	assert.Contains(t, second, `"is_error":true`)
	assert.Contains(t, second, `exception: KeyError: 'Amount'`)
	assert.Contains(t, transcript.String(), "tool result (is_error=true):\n")
}
