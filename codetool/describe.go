// Package codetool is the "run code" tool a Go program gives a model: its
// name, its description, the JSON schema of its input and a handler that
// runs each call in the conversation's Python session and returns the
// outcome in the form a model reads best. It depends on no model SDK: wire
// Name, Description and InputSchema into the SDK's tool definition, pass the
// tool call's arguments to Tool.Call, and send Result.Text (and
// Result.Images) back as the tool's result.
//
//	py, _ := sandbox.CompilePython(ctx, &sandbox.Options{Sessions: true})
//	tool, _ := codetool.New(py, &codetool.Options{Limits: codetool.Limits{Timeout: 10 * time.Second}})
//	defer tool.Close()
//	res := tool.Call(ctx, conversationID, []byte(call.Arguments))
//	send(res.Text(), res.IsError)
//
// The model controls only the code and may lower the run's timeout; every
// other limit comes from Options. Bad arguments (malformed JSON, unknown
// fields, code past Options.MaxCode, a negative timeout) are a Result with
// IsError set that says what was wrong, never a panic or a raised limit.
package codetool

import "maps"

// Name is the tool's name, as the model sees it.
const Name = "run_python"

// Instructions say what the sandbox has and lacks, for a model. The MCP
// server (package mcpserver) gives them as its instructions; Description
// holds them too.
const Instructions = "Python 3 (CPython 3.13, or 3.12 where fumehood's own build is not installed, compiled to WebAssembly) " +
	"with the standard library only: no pip and no third-party packages (no numpy, pandas or matplotlib); ssl and ctypes are missing. " +
	"No network unless the host allows some sites, no subprocesses, no threads. " +
	"The filesystem is in memory: keep data and results under /work, scratch files under /tmp. " +
	"Each run is bounded in wall time, CPU (fuel), memory and output; a run that hits a limit is stopped."

// Description is the tool's description, for the model: what a call does,
// what its result shows, and Instructions.
const Description = "Run Python code and see what it did. State lasts between calls of this conversation, " +
	"as in a notebook: variables, imports, functions and files stay. The result shows stdout, stderr, " +
	"the value of the code's last expression, an exception with its traceback, and the files the run created " +
	"or changed under /work; images (PNG, JPEG, SVG) are attached, so draw a chart by writing one there " +
	"(SVG text, or PNG with zlib). A run stopped by a limit leaves the state as it was before the run. " +
	Instructions

// inputSchema is the JSON schema of the tool's input.
var inputSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"code": map[string]any{
			"type":        "string",
			"description": "Python code to run. If it ends in an expression, its value is shown.",
		},
		"timeout_ms": map[string]any{
			"type":        "integer",
			"minimum":     1,
			"description": "Optional: a shorter wall-time limit for this run, in milliseconds. It cannot raise the tool's limit.",
		},
	},
	"required":             []any{"code"},
	"additionalProperties": false,
}

// InputSchema returns the JSON schema of the tool's input, a fresh copy
// each call: an object with "code" (a string, required) and "timeout_ms"
// (an optional integer), and no other property. Its "properties" and
// "required" entries are what SDKs that split the schema ask for.
func InputSchema() map[string]any {
	return cloneJSON(inputSchema).(map[string]any)
}

func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := maps.Clone(v)
		for k, e := range m {
			m[k] = cloneJSON(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = cloneJSON(e)
		}
		return s
	}
	return v
}
