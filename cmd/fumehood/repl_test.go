package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// TestEditorKeys: the REPL's line editor moves with the arrow keys, brings
// back history with Up, drops the line on Ctrl-C (told apart from Ctrl-D)
// and ends on Ctrl-D at an empty line only.
func TestEditorKeys(t *testing.T) {
	const left, up = "\x1b[D", "\x1b[A"
	keys := "prin(1)" + strings.Repeat(left, 3) + "t\r" + // insert the missing t
		up + "\r" + // the same line again, from the history
		"abc\x03" + // Ctrl-C drops "abc"
		"x\x04\r" + // Ctrl-D on a non-empty line does not end the input
		up + up + "\r" + // the history holds x and print(1), not abc
		"\x04" // Ctrl-D on an empty line does
	var out bytes.Buffer
	ed := newEditor(strings.NewReader(keys), &out)
	for _, want := range []string{"print(1)", "print(1)"} {
		line, err := ed.ReadLine(">>> ")
		require.NoError(t, err)
		assert.Equal(t, want, line)
	}
	_, err := ed.ReadLine(">>> ")
	assert.ErrorIs(t, err, errInterrupted)
	for _, want := range []string{"x", "print(1)"} {
		line, err := ed.ReadLine(">>> ")
		require.NoError(t, err)
		assert.Equal(t, want, line)
	}
	_, err = ed.ReadLine(">>> ")
	assert.ErrorIs(t, err, io.EOF)
	assert.Contains(t, out.String(), "KeyboardInterrupt")
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the REPL's stderr holds text.
func waitFor(t *testing.T, stderr *syncBuffer, text string) {
	t.Helper()
	waitForCount(t, stderr, text, 1)
}

// waitForCount waits until the REPL's stderr holds text n times.
func waitForCount(t *testing.T, stderr *syncBuffer, text string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for strings.Count(stderr.String(), text) < n {
		require.True(t, time.Now().Before(deadline), "not %d× %q: %s", n, text, stderr.String())
		time.Sleep(10 * time.Millisecond)
	}
}

// interruptUntil sends interrupts until the REPL's stderr says the run
// stopped (an interrupt that comes before the run starts is dropped).
func interruptUntil(t *testing.T, stderr *syncBuffer, send func()) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(stderr.String(), "canceled") {
		require.True(t, time.Now().Before(deadline), "the run was not stopped: %s", stderr.String())
		send()
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReplInterruptStopsTheRunOnly: on a terminal, Ctrl-C stops the
// running code, the session keeps its state, the next input runs, and
// Ctrl-D then ends the REPL with status 0. (Before, the first interrupt
// cancelled the whole process's context: every later input was cancelled
// and Ctrl-D no longer exited.)
func TestReplInterruptStopsTheRunOnly(t *testing.T) {
	sandboxtest.Built(t)
	keysR, keysW := io.Pipe()
	var stdout, stderr syncBuffer
	sigs := make(chan os.Signal, 1)
	replLineReader = func(_ io.Reader, prompts io.Writer) lineReader { return newEditor(keysR, prompts) }
	replInterrupts = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	defer func() { replLineReader, replInterrupts = newLineReader, defaultReplInterrupts }()

	done := make(chan int)
	go func() { done <- run(context.Background(), []string{"repl", "--timeout", "60s"}, nil, &stdout, &stderr) }()
	waitFor(t, &stderr, "CPython in a sandbox")
	io.WriteString(keysW, "x = 41\r")
	waitForCount(t, &stderr, ">>> ", 2) // x = 41 ran: an interrupt now is the loop's
	io.WriteString(keysW, "while True: pass\r")
	interruptUntil(t, &stderr, func() {
		select {
		case sigs <- os.Interrupt:
		default:
		}
	})
	io.WriteString(keysW, "x + 1\r\x04")
	select {
	case code := <-done:
		assert.Equal(t, 0, code, stderr.String())
	case <-time.After(time.Minute):
		t.Fatal("Ctrl-D did not end the REPL")
	}
	assert.Equal(t, "42\n", stdout.String(), stderr.String())
	assert.Equal(t, 1, strings.Count(stderr.String(), "canceled"), stderr.String())
}

// TestReplSIGINT: the command itself, in a process of its own: SIGINT
// stops the running code, not the process, and the next input runs.
func TestReplSIGINT(t *testing.T) {
	sandboxtest.Built(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "repl", "--timeout", "60s")
	cmd.Env = append(os.Environ(), "FUMEHOOD_TEST_MAIN=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	waitFor(t, &stderr, "CPython in a sandbox")
	io.WriteString(stdin, "x = 41\n")
	waitForCount(t, &stderr, ">>> ", 2)
	io.WriteString(stdin, "while True: pass\n")
	interruptUntil(t, &stderr, func() { _ = cmd.Process.Signal(syscall.SIGINT) })
	io.WriteString(stdin, "x + 1\n")
	require.NoError(t, stdin.Close())
	err = cmd.Wait()
	var exit *exec.ExitError
	require.False(t, errors.As(err, &exit), "exit status %v: %s", err, stderr.String())
	require.NoError(t, err)
	assert.Equal(t, "42\n", stdout.String(), stderr.String())
}
