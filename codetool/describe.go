// Package codetool is the "run code" tool a Go program gives a model: its
// name, its description, the JSON schema of its input and a handler that
// runs each call in the conversation's Python session and returns the
// outcome in the form a model reads best. It depends on no model SDK: wire
// Name, Description and InputSchema into the SDK's tool definition, pass the
// tool call's arguments to Tool.Call, and send Result.Text (and
// Result.Images) back as the tool's result.
//
//	py, _ := sandbox.CompilePython(ctx, nil)
//	tool, _ := codetool.New(py, &codetool.Options{Limits: sandbox.Limits{Timeout: 10 * time.Second}})
//	defer tool.Close()
//	res := tool.Call(ctx, conversationID, []byte(call.Arguments))
//	send(res.Text(), res.IsError)
//
// The model controls only the code and may lower the run's timeout; every
// other limit comes from Options. Bad arguments (malformed JSON, unknown
// fields, code past Options.MaxCode, a negative timeout) are a Result with
// IsError set that says what was wrong, never a panic or a raised limit.
package codetool

import (
	"maps"

	"github.com/fumehood/fumehood/internal/runtool"
)

// Name is the tool's name, as the model sees it.
const Name = "run_python"

// Instructions say what the sandbox has and lacks, for a model: the text
// for the Python guest `fumehood guest build` makes (CPython 3.13.5,
// without optional parts) with no network and no mounts. Tool.Instructions
// and the MCP server give the text for the guest they run and the network
// and mounts they give it; Description holds this one.
const Instructions = "Python 3.13.5 (CPython compiled to WebAssembly) with the standard library only: " +
	"no pip and no third-party packages (no numpy, pandas or matplotlib); ssl and ctypes are missing. " +
	"No network: urllib, http.client and sockets raise PermissionError. " +
	"No subprocesses. One thread: threading.Thread.start runs the target to its end before returning (a wait on another thread raises), and asyncio and concurrent.futures' executors run tasks one after another. " +
	"The filesystem is in memory: keep data and results under /work, scratch files under /tmp. " +
	"Each run is bounded in wall time, CPU (fuel), memory and output; a run that hits a limit is stopped."

// statefulIntro is the part of Description that is the code tool's own.
const statefulIntro = "Run Python code and see what it did. State lasts between calls of this conversation, " +
	"as in a notebook: variables, imports, functions and files stay. "

// Description is the tool's description, for the model: what a call does,
// what its result shows, and Instructions. Tool.Description gives it with
// the instructions for the tool's guest, network and mounts.
const Description = statefulIntro + runtool.ResultShows + " " + runtool.FilesShown + " " + runtool.Rollback + " " + Instructions

// describe returns Description with other instructions.
func describe(instructions string) string {
	return statefulIntro + runtool.ResultShows + " " + runtool.FilesShown + " " + runtool.Rollback + " " + instructions
}

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
