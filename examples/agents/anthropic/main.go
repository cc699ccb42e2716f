// Command anthropic gives a Claude model (official Go SDK,
// github.com/anthropics/anthropic-sdk-go/v2) fumehood's code tool, and runs
// the tool loop: the model asks for code to be run, the sandbox runs it in
// the conversation's Python session, the result (text, and any PNG or JPEG
// chart as an image block) goes back, until the model answers.
//
//	ANTHROPIC_API_KEY=... go run ./anthropic
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/examples/agents"
	"github.com/fumehood/fumehood/sandbox"
)

func main() {
	ctx := context.Background()
	client := anthropic.NewClient(option.WithMaxRetries(2)) // ANTHROPIC_API_KEY from the environment
	answer, err := run(ctx, client, anthropic.ModelClaudeSonnet5_5, agents.Task, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(answer)
}

// maxTurns bounds the model's requests in one task.
const maxTurns = 10

// run asks model the question with the code tool and runs the tool loop,
// writing a transcript to w. It returns the model's final answer.
func run(ctx context.Context, client anthropic.Client, model anthropic.Model, question string, w io.Writer) (string, error) {
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		return "", err
	}
	defer py.Close()
	tool, err := codetool.New(py, &codetool.Options{
		Limits: agents.Limits,
		Setup:  agents.Setup,
	})
	if err != nil {
		return "", err
	}
	defer tool.Close()

	// The code tool, as the Messages API takes a client tool.
	schema := codetool.InputSchema()
	tools := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
		Name:        codetool.Name,
		Description: anthropic.String(tool.Description()),
		InputSchema: anthropic.ToolInputSchemaParam{
			Properties:  schema["properties"],
			Required:    []string{"code"},
			ExtraFields: map[string]any{"additionalProperties": false},
		},
	}}}
	conversation := newID()

	fmt.Fprintf(w, "user: %s\n", question)
	messages := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(question))}
	for range maxTurns {
		msg, err := client.Messages.New(ctx, anthropic.MessageNewParams{
			Model: model, MaxTokens: 4096, Tools: tools, Messages: messages,
		})
		if err != nil {
			return "", err
		}
		messages = append(messages, msg.ToParam())
		var results []anthropic.ContentBlockParamUnion
		var text strings.Builder
		for _, block := range msg.Content {
			switch block.Type {
			case "text":
				text.WriteString(block.Text)
			case "tool_use":
				fmt.Fprintf(w, "\nmodel calls %s:\n%s", block.Name, indent(agents.Shown(string(block.Input))))
				var res *codetool.Result
				if block.Name == codetool.Name {
					res = tool.Call(ctx, conversation, block.Input)
				} else {
					res = &codetool.Result{Error: "no tool named " + block.Name, IsError: true}
				}
				fmt.Fprintf(w, "tool result (is_error=%v):\n%s", res.IsError, indent(res.Text()))
				results = append(results, toolResult(block.ID, res))
			}
		}
		if len(results) == 0 {
			fmt.Fprintf(w, "\nmodel: %s\n", text.String())
			return text.String(), nil
		}
		messages = append(messages, anthropic.NewUserMessage(results...))
	}
	return "", fmt.Errorf("no answer after %d turns", maxTurns)
}

// toolResult is a tool result block: the text, then each image the code
// drew (a chart): a PNG or JPEG as an image block, an SVG, which the API
// does not take as an image, as its source text.
func toolResult(id string, res *codetool.Result) anthropic.ContentBlockParamUnion {
	content := []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: res.Text()}}}
	for _, img := range res.Images() {
		if img.IsRaster() {
			content = append(content, anthropic.ToolResultBlockParamContentUnion{OfImage: &anthropic.ImageBlockParam{
				Source: anthropic.ImageBlockParamSourceUnion{OfBase64: &anthropic.Base64ImageSourceParam{
					Data: img.Base64(), MediaType: anthropic.Base64ImageSourceMediaType(img.MediaType),
				}},
			}})
		} else {
			content = append(content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: img.Path + ":\n" + string(img.Data)}})
		}
	}
	return anthropic.ContentBlockParamUnion{OfToolResult: &anthropic.ToolResultBlockParam{
		ToolUseID: id, Content: content, IsError: anthropic.Bool(res.IsError),
	}}
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return "conversation-" + hex.EncodeToString(b[:])
}

// indent indents each line of s for the transcript.
func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}
