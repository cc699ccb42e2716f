package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/term"
)

// errInterrupted is a Ctrl-C at the prompt: the input so far is dropped.
var errInterrupted = errors.New("interrupted")

// lineReader reads the REPL's input a line at a time, with a prompt.
type lineReader interface {
	// ReadLine returns the next line without its newline, io.EOF at the
	// end of the input (Ctrl-D on an empty line), or errInterrupted.
	ReadLine(prompt string) (string, error)
	// Close gives the terminal back as it was.
	Close() error
}

// newLineReader is a line editor with history when stdin is a terminal,
// else plain lines.
func newLineReader(stdin io.Reader, prompts io.Writer) lineReader {
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return &termReader{fd: int(f.Fd()), ed: newEditor(f, prompts)}
	}
	return &plainReader{in: bufio.NewReader(stdin), prompts: prompts}
}

// plainReader reads lines from a pipe or file, writing the prompts.
type plainReader struct {
	in      *bufio.Reader
	prompts io.Writer
}

func (p *plainReader) ReadLine(prompt string) (string, error) {
	io.WriteString(p.prompts, prompt)
	line, err := p.in.ReadString('\n')
	if err != nil && line != "" {
		err = nil // the last line, without a newline
	}
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	return line, err
}

func (p *plainReader) Close() error { return nil }

// termReader edits lines on a terminal (golang.org/x/term: arrow keys,
// Home/End, word moves and deletes, Up/Down through the history). The
// terminal is raw only while a line is read, so that a run's output and
// Ctrl-C (SIGINT, which stops the run) behave as usual.
type termReader struct {
	fd int
	ed *editor
}

func (t *termReader) ReadLine(prompt string) (string, error) {
	old, err := term.MakeRaw(t.fd)
	if err != nil {
		return "", err
	}
	defer term.Restore(t.fd, old)
	return t.ed.ReadLine(prompt)
}

func (t *termReader) Close() error { return nil }

// editor is x/term's line editor over any reader of keystrokes. x/term
// ends the line with io.EOF for both Ctrl-C and Ctrl-D, and keeps the
// Ctrl-C and the line typed for the next read; so a Ctrl-C reaches it as
// Enter, and the line it ends is dropped, not run and not kept in the
// history.
type editor struct {
	keys *keyWatch
	t    *term.Terminal
}

func newEditor(keys io.Reader, out io.Writer) *editor {
	w := &keyWatch{r: keys}
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{w, out}, "")
	t.History = &history{keys: w}
	return &editor{keys: w, t: t}
}

func (e *editor) ReadLine(prompt string) (string, error) {
	e.t.SetPrompt(prompt)
	line, err := e.t.ReadLine()
	if e.keys.ctrlC.Swap(false) {
		e.t.Write([]byte("KeyboardInterrupt\n"))
		return "", errInterrupted
	}
	return line, err
}

// Close does nothing: the editor holds no terminal state.
func (e *editor) Close() error { return nil }

// keyWatch passes keystrokes on, a Ctrl-C as Enter, noting it.
type keyWatch struct {
	r     io.Reader
	ctrlC atomic.Bool
}

func (k *keyWatch) Read(b []byte) (int, error) {
	// One byte at a time, so that x/term holds no keys read ahead of the
	// line it returns: a Ctrl-C noted is this line's. (Keys come at a
	// person's pace; a paste costs a read per byte, which is cheap.)
	n, err := k.r.Read(b[:min(len(b), 1)])
	if n == 1 && b[0] == 3 {
		b[0] = '\r'
		k.ctrlC.Store(true)
	}
	return n, err
}

// history keeps the last maxHistory lines entered, not those a Ctrl-C
// dropped, nor empty lines or repeats of the last one.
type history struct {
	keys    *keyWatch
	entries []string // oldest first
}

const maxHistory = 1000

func (h *history) Add(entry string) {
	if h.keys.ctrlC.Load() || strings.TrimSpace(entry) == "" ||
		(len(h.entries) > 0 && h.entries[len(h.entries)-1] == entry) {
		return
	}
	if len(h.entries) == maxHistory {
		h.entries = append(h.entries[:0], h.entries[1:]...)
	}
	h.entries = append(h.entries, entry)
}

func (h *history) Len() int { return len(h.entries) }

func (h *history) At(i int) string { return h.entries[len(h.entries)-1-i] }
