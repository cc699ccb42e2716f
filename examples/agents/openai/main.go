// Command openai gives a model of the OpenAI Responses API (official Go
// SDK, github.com/openai/openai-go/v3) fumehood's code tool, and runs the
// tool loop: the model asks for code to be run, the sandbox runs it in the
// conversation's Python session, the result (text, and any PNG or JPEG
// chart as an image) goes back, until the model answers.
//
//	OPENAI_API_KEY=... go run ./openai
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/examples/agents"
	"github.com/fumehood/fumehood/sandbox"
)

func main() {
	ctx := context.Background()
	client := openai.NewClient(option.WithMaxRetries(2)) // OPENAI_API_KEY from the environment
	answer, err := run(ctx, client, openai.ChatModelGPT5_2, agents.Task, os.Stdout)
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
func run(ctx context.Context, client openai.Client, model string, question string, w io.Writer) (string, error) {
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

	// The code tool, as the Responses API takes a function tool. Not
	// strict: timeout_ms is optional.
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
		Name:        codetool.Name,
		Description: openai.String(tool.Description()),
		Parameters:  codetool.InputSchema(),
		Strict:      openai.Bool(false),
	}}}
	conversation := newID()

	fmt.Fprintf(w, "user: %s\n", question)
	params := responses.ResponseNewParams{
		Model: model, Tools: tools,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(question)},
	}
	for range maxTurns {
		resp, err := client.Responses.New(ctx, params)
		if err != nil {
			return "", err
		}
		var outputs responses.ResponseInputParam
		for _, item := range resp.Output {
			if item.Type != "function_call" {
				continue
			}
			call := item.AsFunctionCall()
			fmt.Fprintf(w, "\nmodel calls %s:\n%s", call.Name, indent(agents.Shown(call.Arguments)))
			var res *codetool.Result
			if call.Name == codetool.Name {
				res = tool.Call(ctx, conversation, []byte(call.Arguments))
			} else {
				res = &codetool.Result{Error: "no tool named " + call.Name, IsError: true}
			}
			fmt.Fprintf(w, "tool result (is_error=%v):\n%s", res.IsError, indent(res.Text()))
			outputs = append(outputs, responses.ResponseInputItemUnionParam{
				OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
					CallID: openai.String(call.CallID),
					Output: output(res),
				},
			})
		}
		if len(outputs) == 0 {
			answer := resp.OutputText()
			fmt.Fprintf(w, "\nmodel: %s\n", answer)
			return answer, nil
		}
		params = responses.ResponseNewParams{
			Model: model, Tools: tools, PreviousResponseID: openai.String(resp.ID),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: outputs},
		}
	}
	return "", fmt.Errorf("no answer after %d turns", maxTurns)
}

// output is a tool result as a function call's output: the text, then each
// image the code drew (a chart): a PNG or JPEG as an input image, an SVG,
// which the API does not take as an image, as its source text.
func output(res *codetool.Result) responses.ResponseInputItemFunctionCallOutputOutputUnionParam {
	items := responses.ResponseFunctionCallOutputItemListParam{{
		OfInputText: &responses.ResponseInputTextContentParam{Text: res.Text()},
	}}
	for _, img := range res.Images() {
		var item responses.ResponseFunctionCallOutputItemUnionParam
		if img.IsRaster() {
			item.OfInputImage = &responses.ResponseInputImageContentParam{
				ImageURL: openai.String("data:" + img.MediaType + ";base64," + img.Base64()),
			}
		} else {
			item.OfInputText = &responses.ResponseInputTextContentParam{Text: img.Path + ":\n" + string(img.Data)}
		}
		items = append(items, item)
	}
	return responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfResponseFunctionCallOutputItemArray: items}
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
