package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// IOTransport carries newline-delimited JSON-RPC messages over a reader
// and a writer, as mcp.IOTransport does (`fumehood mcp` serves stdio on
// it), except that a line that is not a JSON-RPC message is answered and
// skipped. The SDK's transport ends the connection on such a line, and
// with it every session of the client.
//
// A line that is not JSON is answered with a parse error (-32700), a JSON
// value that is not a JSON-RPC message, or a batch (a JSON array: MCP
// dropped batches in 2025-06-18, and the SDK ends the connection on one it
// refuses), with an invalid request (-32600); both have a null id unless
// the line carried a usable one. Blank lines are skipped. Neither Reader
// nor Writer is closed.
type IOTransport struct {
	Reader io.Reader
	Writer io.Writer
	// MaxLineLength bounds a line in bytes; 0 means mcp.DefaultMaxLineLength.
	// A longer line is answered with a parse error and skipped.
	MaxLineLength int
}

// Connect implements mcp.Transport.
func (t *IOTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	limit := t.MaxLineLength
	if limit <= 0 {
		limit = mcp.DefaultMaxLineLength
	}
	w := &lockedWriter{w: t.Writer}
	pr, pw := io.Pipe()
	go filterLines(t.Reader, pw, w, limit)
	// The SDK reads only the lines that passed, each within limit: its own
	// bound, which counts bytes read ahead too, would add nothing.
	return (&mcp.IOTransport{Reader: pr, Writer: w, MaxLineLength: -1}).Connect(ctx)
}

// lockedWriter lets the SDK's responses and the filter's error responses
// share one writer: each is one Write call, never interleaved.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }

// filterLines copies the well-formed lines of r to pw and answers the
// others on w, until r ends or pw is closed (the connection closed).
func filterLines(r io.Reader, pw *io.PipeWriter, w io.Writer, limit int) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, tooLong, err := readLine(br, limit)
		line = bytes.TrimSpace(line)
		switch {
		case tooLong:
			reply(w, nil, jsonrpc.CodeParseError, fmt.Sprintf("parse error: a line is longer than %d bytes", limit))
		case len(line) == 0:
		default:
			if id, code, msg := check(line); code != 0 {
				reply(w, id, code, msg)
			} else if _, werr := pw.Write(append(line, '\n')); werr != nil {
				return // the connection is closed
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			pw.CloseWithError(err)
			return
		}
	}
}

// readLine reads one line of at most limit bytes, without its newline. A
// longer one is read to its end and dropped, and reported as tooLong.
func readLine(br *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > limit+2 { // +2: "\r\n"
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(bytes.TrimRight(line, "\r\n")) > limit {
			tooLong, line = true, nil
		}
		return line, tooLong, err
	}
}

// check returns the error code and message of a line that the SDK would
// refuse by ending the connection, and the line's id if it has one; code
// 0 means the line is a message.
func check(line []byte) (id any, code int64, msg string) {
	if !json.Valid(line) {
		return nil, jsonrpc.CodeParseError, "parse error: the line is not JSON"
	}
	if line[0] == '[' {
		return nil, jsonrpc.CodeInvalidRequest, "invalid request: batches are not supported"
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		var head struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(line, &head) == nil && len(head.ID) > 0 && len(head.ID) <= 200 {
			// A string or a number, as the client wrote it.
			if c := head.ID[0]; c == '"' || c == '-' || c >= '0' && c <= '9' {
				id = head.ID
			}
		}
		return id, jsonrpc.CodeInvalidRequest, "invalid request: " + trunc(err.Error(), 200)
	}
	return nil, 0, ""
}

// reply writes a JSON-RPC error response.
func reply(w io.Writer, id any, code int64, msg string) {
	type wireError struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}
	b, err := json.Marshal(struct {
		JSONRPC string    `json:"jsonrpc"`
		ID      any       `json:"id"`
		Error   wireError `json:"error"`
	}{"2.0", id, wireError{code, msg}})
	if err != nil {
		return
	}
	w.Write(append(b, '\n'))
}
