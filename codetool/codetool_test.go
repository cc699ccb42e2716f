package codetool_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/internal/runtool"
	"github.com/fumehood/fumehood/netpolicy"
	"github.com/fumehood/fumehood/sandbox"
)

func newTool(t *testing.T, o *codetool.Options) *codetool.Tool {
	t.Helper()
	tool, err := codetool.New(sandboxtest.Python(t), o)
	require.NoError(t, err)
	t.Cleanup(func() { tool.Close() })
	return tool
}

func args(code string) []byte {
	b, _ := json.Marshal(map[string]any{"code": code})
	return b
}

// TestSchemaAndDescription: the schema is a fresh, valid JSON object each
// call, and the description holds the instructions.
func TestSchemaAndDescription(t *testing.T) {
	s := codetool.InputSchema()
	s["type"] = "changed"
	s2 := codetool.InputSchema()
	assert.Equal(t, "object", s2["type"])
	assert.Equal(t, []any{"code"}, s2["required"])
	assert.Equal(t, false, s2["additionalProperties"])
	_, err := json.Marshal(s2)
	require.NoError(t, err)
	assert.Contains(t, codetool.Description, codetool.Instructions)
	assert.Contains(t, codetool.Description, runtool.ResultShows)
	assert.Equal(t, "run_python", codetool.Name)
}

// TestInstructionsFromTheGuest: the instructions are one text, filled in
// from what the guest has (Probe) and what network and mounts the host
// gives: Instructions is that text for the built guest with none.
func TestInstructionsFromTheGuest(t *testing.T) {
	py := sandboxtest.Python(t)
	info, err := runtool.Probe(context.Background(), py)
	require.NoError(t, err)
	if len(py.Python().With) == 0 {
		assert.Equal(t, runtool.BuiltGuest, info, "what Instructions describes is what the guest has")
	}
	assert.Equal(t, py.Python().Version, info.Version)
	assert.Equal(t, codetool.Instructions, runtool.InstructionsFor(runtool.BuiltGuest, nil, nil))
	tool := newTool(t, nil)
	assert.True(t, strings.HasPrefix(tool.Instructions(), runtool.InstructionsFor(info, nil, nil)+" "), tool.Instructions())
	assert.True(t, strings.HasSuffix(tool.Description(), " "+tool.Instructions()), tool.Description())
	// The model is told the limits it has, with the tool's values.
	assert.Contains(t, tool.Description(), "Limits of each run: 30s of wall time (timeout_ms can only shorten it), "+
		"3 trillion of CPU (WebAssembly instructions; print(1) costs about 2 million), 512 MiB of memory (past it MemoryError) "+
		"and 1 MiB of each of stdout and stderr (past it output is cut). A conversation with no call for 10m0s is closed and its state lost.")
	tool = newTool(t, &codetool.Options{Limits: sandbox.Limits{Timeout: 1500 * time.Millisecond, Fuel: 5e9, Memory: 100 << 20,
		MaxOutput: 1000}, IdleTimeout: -1})
	assert.Contains(t, tool.Description(), "Limits of each run: 1.5s of wall time (timeout_ms can only shorten it), "+
		"5 billion of CPU (WebAssembly instructions; print(1) costs about 2 million), 100 MiB of memory (past it MemoryError) "+
		"and 1000 bytes of each of stdout and stderr (past it output is cut).")
	assert.NotContains(t, tool.Description(), "no call for")

	// Another guest, a network and mounts.
	got := runtool.InstructionsFor(runtool.GuestInfo{Version: "3.13.5", Lacks: []string{"ctypes"}},
		&netpolicy.Policy{Allow: []netpolicy.Rule{{Scheme: "https", Host: "api.example.com"}, {Host: "*.example.org"}}},
		[]sandbox.Mount{{Path: "/data", ReadOnly: true}, {Path: "/out"}})
	assert.Contains(t, got, "Python 3.13.5 (CPython")
	assert.Contains(t, got, "; ctypes is missing.")
	assert.NotContains(t, got, "lzma")
	assert.Contains(t, got, "only to https://api.example.com, http(s)://*.example.org; no raw sockets.")
	assert.NotContains(t, got, "No network")
	assert.Contains(t, got, "host directories are mounted at /data (read-only), /out (read-write).")
	tool = newTool(t, &codetool.Options{Network: &netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "example.com"}}}})
	assert.Contains(t, tool.Description(), "only to http(s)://example.com;")
	assert.Contains(t, runtool.InstructionsFor(runtool.GuestInfo{Version: "3.13.5"}, nil, nil),
		"(no numpy, pandas or matplotlib). No network")

	// A variant names its packages, and tells how to draw a chart when
	// it has matplotlib.
	got = runtool.InstructionsFor(runtool.GuestInfo{Version: "3.13.5", Packages: []string{"numpy 2.2.5", "pandas 2.2.3"}}, nil, nil)
	assert.Contains(t, got, "with the standard library and numpy 2.2.5 and pandas 2.2.3: no pip and no other third-party packages.")
	assert.NotContains(t, got, "matplotlib")
	got = runtool.InstructionsFor(runtool.GuestInfo{Version: "3.13.5", Packages: []string{"numpy", "matplotlib 3.10.9"}}, nil, nil)
	assert.Contains(t, got, `plt.savefig("/work/chart.png")`)
}

// TestParseInput: every bad argument is an ErrBadArguments that says what
// was wrong.
func TestParseInput(t *testing.T) {
	in, err := codetool.ParseInput([]byte(`{"code": "1+1", "timeout_ms": 500}`), 100)
	require.NoError(t, err)
	assert.Equal(t, codetool.Input{Code: "1+1", TimeoutMS: 500}, in)

	for _, c := range []struct{ args, want string }{
		{`{"code": "1+1"`, "unexpected EOF"},
		{`not json`, "invalid character"},
		{`{"code": "1", "memory_limit": 1000000000}`, `unknown field "memory_limit"`},
		{`{"code": 5}`, `"code" must be a string`},
		{`{"code": "1", "timeout_ms": 1.5}`, `"timeout_ms" must be a positive integer`},
		{`{"code": "1", "timeout_ms": 1e30}`, `"timeout_ms" must be a positive integer`},
		{`{}`, `"code" is missing or empty`},
		{`{"code": "  "}`, `"code" is missing or empty`},
		{`{"code": "1"} {"code": "2"}`, "one JSON object"},
		{`[]`, "not {"},
		{`null`, `"code" is missing`},
		{`{"code": "` + strings.Repeat("x", 101) + `"}`, "the code is 101 bytes, more than the 100"},
		{`{"code": "` + strings.Repeat("x", 10_000) + `"}`, "send at most 100 bytes of code"},
	} {
		_, err := codetool.ParseInput([]byte(c.args), 100)
		require.ErrorIs(t, err, codetool.ErrBadArguments, c.args)
		assert.Contains(t, err.Error(), c.want, c.args)
	}
}

// TestLowerNeverRaises: a call lowers the timeout and fuel, never raises
// them; unset limits resolve to the sandbox's defaults first.
func TestLowerNeverRaises(t *testing.T) {
	var tool sandbox.Limits // a tool's Options.Limits, all defaults
	l, err := tool.Lower(sandbox.Limits{})
	require.NoError(t, err)
	assert.Equal(t, sandbox.DefaultTimeout, l.Timeout)
	assert.Equal(t, int64(sandbox.DefaultTimeout/time.Second)*sandbox.DefaultFuelPerSecond, l.Fuel)
	assert.Equal(t, sandbox.DefaultMaxOutput, l.MaxOutput)

	req, err := runtool.CallLimits(1000, 5)
	require.NoError(t, err)
	cfg, err := tool.Lower(req)
	require.NoError(t, err)
	assert.Equal(t, time.Second, cfg.Timeout)
	assert.Equal(t, int64(5), cfg.Fuel)

	req, err = runtool.CallLimits(1<<40, 1<<62)
	require.NoError(t, err)
	cfg, err = tool.Lower(req)
	require.NoError(t, err)
	assert.Greater(t, req.Timeout, cfg.Timeout, "raised: the request was above the limit")
	assert.Equal(t, sandbox.DefaultTimeout, cfg.Timeout)
	assert.Equal(t, int64(sandbox.DefaultTimeout/time.Second)*sandbox.DefaultFuelPerSecond, cfg.Fuel)

	for _, c := range [][2]int64{{-1, 0}, {0, -1}, {1 << 62, 0}} {
		_, err := runtool.CallLimits(c[0], c[1])
		assert.ErrorIs(t, err, codetool.ErrBadArguments, c)
	}
	_, err = sandbox.Limits{Fuel: -1}.Lower(sandbox.Limits{})
	assert.Error(t, err)
}

// TestResultText: the text a model reads, with each section.
func TestResultText(t *testing.T) {
	v := "42"
	r := &codetool.Result{Stdout: "hi", Value: &v,
		Exception: &sandbox.Exception{Type: "ValueError", Message: "bad", Traceback: "Traceback...\nValueError: bad\n"},
		Files:     []codetool.File{{Path: "/work/a.png", Size: 3, MediaType: "image/png", Data: []byte{1, 2, 3}}, {Path: "/work/b.csv", Size: 9}},
		Truncated: []string{"stdout"}, Notes: []string{"n1"}}
	assert.Equal(t, "stdout:\nhi\nvalue: 42\nexception: ValueError: bad\ntraceback:\nTraceback...\nValueError: bad\n"+
		"files:\n  /work/a.png (3 bytes, image/png, attached)\n  /work/b.csv (9 bytes)\n"+
		"(cut: stdout went past the output limit, and part of it was dropped; print less, or write it to a file under /work and read parts of it)\n"+
		"note: n1\n", r.Text())
	assert.Len(t, r.Images(), 1)
	assert.True(t, r.Images()[0].IsRaster())
	assert.Equal(t, "AQID", r.Images()[0].Base64())
	assert.Equal(t, "(no output)\n", (&codetool.Result{}).Text())
}

// TestCallKeepsState: the calls of one conversation share a session;
// another conversation has its own.
func TestCallKeepsState(t *testing.T) {
	tool := newTool(t, nil)
	ctx := context.Background()
	r := tool.Call(ctx, "a", args("x = 20\nprint('set')"))
	require.False(t, r.IsError, r.Text())
	assert.Equal(t, "stdout:\nset\n", r.Text())
	r = tool.Call(ctx, "a", args("x + 22"))
	require.False(t, r.IsError, r.Text())
	assert.Equal(t, "42", *r.Value)
	r = tool.Call(ctx, "b", args("x"))
	assert.True(t, r.IsError)
	var exc *sandbox.Exception
	require.ErrorAs(t, r.Err, &exc)
	assert.Equal(t, "NameError", exc.Type)
	assert.Contains(t, r.Text(), "exception: NameError: name 'x' is not defined\n")
	assert.Contains(t, r.Text(), "Traceback (most recent call last)")
	assert.Equal(t, 2, tool.Sessions())

	require.NoError(t, tool.End(ctx, "a"))
	assert.Equal(t, 1, tool.Sessions())
	r = tool.Call(ctx, "a", args("x"))
	assert.True(t, r.IsError, "a fresh session after End")
}

// TestBadInputIsAResult: malformed arguments, unknown fields, huge code
// and a request to raise the timeout give a result that says so; none
// raises a limit.
func TestBadInputIsAResult(t *testing.T) {
	tool := newTool(t, &codetool.Options{Limits: sandbox.Limits{Timeout: 2 * time.Second}, MaxCode: 1000})
	ctx := context.Background()
	for _, a := range []string{`{"code": "1"`, `{"code": "1", "timeout": 9}`, `{"code": "` + strings.Repeat("1", 2000) + `"}`,
		`{"code": "1", "timeout_ms": -3}`, `{"code": "1", "fuel": 1}`} {
		r := tool.Call(ctx, "c", []byte(a))
		assert.True(t, r.IsError, a)
		assert.ErrorIs(t, r.Err, codetool.ErrBadArguments, a)
		assert.Contains(t, r.Text(), "error: codetool: bad arguments: ", a)
	}
	assert.Equal(t, 0, tool.Sessions(), "bad arguments start no session")

	// A raise is refused with a note; the run keeps the tool's 2 s.
	r := tool.Call(ctx, "c", []byte(`{"code": "while True: pass", "timeout_ms": 3600000}`))
	assert.True(t, r.IsError)
	assert.Equal(t, "deadline", r.StoppedBy)
	assert.ErrorIs(t, r.Err, context.DeadlineExceeded)
	assert.Less(t, r.Run.Duration, time.Minute)
	assert.Contains(t, r.Text(), "note: timeout_ms 3600000 is above this tool's limit; the run had 2s\n")

	// A lower one applies.
	r = tool.Call(ctx, "c", []byte(`{"code": "while True: pass", "timeout_ms": 100}`))
	assert.Equal(t, "deadline", r.StoppedBy)
	assert.Less(t, r.Run.Duration, 2*time.Second)
	assert.Empty(t, r.Notes)
}

// TestFilesAndImages: new and changed files under /work are listed,
// images carry their bytes; files outside it and unchanged ones are not.
func TestFilesAndImages(t *testing.T) {
	tool := newTool(t, &codetool.Options{MaxImageBytes: 100_000, Setup: func(ctx context.Context, conv string, s *sandbox.Session) error {
		return s.Files().WriteFile("/work/data.csv", []byte("a,b\n1,2\n"))
	}})
	ctx := context.Background()
	code := `
import zlib, struct, os
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
raw = b"".join(b"\x00" + b"\xff\x00\x00" * 4 for _ in range(4))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
open("/work/chart.png", "wb").write(png)
open("/work/chart.svg", "w").write('<svg xmlns="http://www.w3.org/2000/svg"><rect width="4" height="4"/></svg>')
os.makedirs("/work/out", exist_ok=True)
open("/work/out/big.svg", "w").write("<svg>" + "x" * 200000 + "</svg>")
open("/work/out/table.txt", "w").write("t")
open("/tmp/scratch.txt", "w").write("not listed")
print(open("/work/data.csv").read().count("\n"))
`
	r := tool.Call(ctx, "f", args(code))
	require.False(t, r.IsError, r.Text())
	var paths []string
	for _, f := range r.Files {
		paths = append(paths, f.Path)
	}
	assert.Equal(t, []string{"/work/chart.png", "/work/chart.svg", "/work/out/big.svg", "/work/out/table.txt"}, paths)
	imgs := r.Images()
	require.Len(t, imgs, 2)
	assert.Equal(t, "image/png", imgs[0].MediaType)
	assert.True(t, imgs[0].IsRaster())
	assert.Equal(t, []byte("\x89PNG"), imgs[0].Data[:4])
	assert.Equal(t, "image/svg+xml", imgs[1].MediaType)
	assert.False(t, imgs[1].IsRaster())
	assert.Contains(t, r.Text(), "  /work/out/big.svg (200011 bytes, image/svg+xml, too large to attach)\n")
	assert.Contains(t, r.Text(), "  /work/chart.png (")

	// JSON carries the image as base64.
	j, err := json.Marshal(r)
	require.NoError(t, err)
	assert.Contains(t, string(j), `"data":"`+base64.StdEncoding.EncodeToString(imgs[0].Data)+`"`)

	// Unchanged files are not listed again; a changed one is.
	r = tool.Call(ctx, "f", args("open('/work/out/table.txt', 'w').write('tt')"))
	require.False(t, r.IsError, r.Text())
	require.Len(t, r.Files, 1)
	assert.Equal(t, "/work/out/table.txt", r.Files[0].Path)
	assert.Equal(t, int64(2), r.Files[0].Size)

	// At most 8 images carry their data, at most 64 files are listed.
	r = tool.Call(ctx, "f", args("for i in range(100): open(f'/work/p{i:03}.png', 'wb').write(png)"))
	require.False(t, r.IsError, r.Text())
	assert.Len(t, r.Files, 64)
	assert.Len(t, r.Images(), 8)
	assert.Equal(t, []string{"files"}, r.Truncated)
	assert.Contains(t, r.Text(), "(only the first 64 files are listed)\n")
	assert.NotContains(t, r.Text(), "went past the output limit")
}

// TestMaxSessionsAndIdle: an idle session is closed and the next call
// starts a fresh one, whose result says so.
func TestMaxSessionsAndIdle(t *testing.T) {
	tool := newTool(t, &codetool.Options{MaxSessions: 1, IdleTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	r := tool.Call(ctx, "one", args("v = 1"))
	require.False(t, r.IsError, r.Text())
	require.Eventually(t, func() bool { return tool.Sessions() == 0 }, 10*time.Second, 20*time.Millisecond)
	r = tool.Call(ctx, "two", args("2"))
	require.False(t, r.IsError, r.Text())
	assert.Empty(t, r.Notes)
	r = tool.Call(ctx, "two", args("v"))
	assert.True(t, r.IsError, "conversation two never set v")
	assert.Empty(t, r.Notes)

	// Conversation one's session idled out: its next call says its state is gone.
	require.NoError(t, tool.End(ctx, "two"))
	r = tool.Call(ctx, "one", args("v"))
	assert.True(t, r.IsError)
	assert.Contains(t, r.Text(), "note: this conversation's previous session was closed after 300ms without calls")
}

// TestMaxSessionsEvictsLeastRecent: past MaxSessions, a new conversation
// closes the session of the one least recently called (its next call
// says its state is gone), so a new conversation is not locked out by
// idle ones; only when every session has a call in progress is it
// refused with ErrTooManySessions.
func TestMaxSessionsEvictsLeastRecent(t *testing.T) {
	tool := newTool(t, &codetool.Options{MaxSessions: 2})
	ctx := context.Background()
	for _, c := range []string{"a", "b", "a"} {
		r := tool.Call(ctx, c, args("v = '"+c+"'"))
		require.False(t, r.IsError, r.Text())
	}
	// b is the least recently called: c takes its place.
	r := tool.Call(ctx, "c", args("v = 'c'"))
	require.False(t, r.IsError, r.Text())
	assert.Empty(t, r.Notes)
	assert.Equal(t, 2, tool.Sessions())
	r = tool.Call(ctx, "a", args("v"))
	require.False(t, r.IsError, r.Text())
	assert.Equal(t, "'a'", *r.Value, "a was used more recently than b: kept")
	r = tool.Call(ctx, "b", args("v"))
	assert.True(t, r.IsError, "b's state is gone: %s", r.Text())
	assert.Contains(t, r.Text(), "NameError")
	assert.Contains(t, r.Text(), "note: this conversation's previous session was closed to make room for another conversation "+
		"(this tool keeps at most 2 sessions, and closes the least recently used first)")
	// b took c's place (c was older than a): a is still there.
	r = tool.Call(ctx, "a", args("v"))
	require.False(t, r.IsError, r.Text())
	assert.Equal(t, "'a'", *r.Value)
	assert.Empty(t, r.Notes)

	// With both sessions in a call, a third conversation is refused.
	busy := make(chan *codetool.Result, 2)
	for _, c := range []string{"a", "b"} {
		go func() { busy <- tool.Call(ctx, c, args("import time\ntime.sleep(1.5)")) }()
	}
	time.Sleep(500 * time.Millisecond)
	r = tool.Call(ctx, "d", args("1"))
	assert.ErrorIs(t, r.Err, codetool.ErrTooManySessions)
	assert.Contains(t, r.Text(), "all have a call in progress")
	for range 2 {
		r := <-busy
		assert.False(t, r.IsError, r.Text())
	}
	r = tool.Call(ctx, "d", args("1"))
	assert.False(t, r.IsError, "once a call ends its session can make room: %s", r.Text())
}

// TestConcurrentConversations: calls of several conversations at once,
// and of one conversation from several goroutines, run one at a time per
// conversation, each seeing its own state.
func TestConcurrentConversations(t *testing.T) {
	tool := newTool(t, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan string, 12)
	for c := range 3 {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := tool.Call(ctx, fmt.Sprint("conv", c), args(fmt.Sprintf("n = globals().get('n', 0) + 1\nconv = %d\n(conv, n)", c)))
				if r.IsError || r.Value == nil || !strings.HasPrefix(*r.Value, fmt.Sprintf("(%d, ", c)) {
					errs <- r.Text()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for c := range 3 {
		r := tool.Call(ctx, fmt.Sprint("conv", c), args("n"))
		assert.Equal(t, "4", *r.Value)
	}
}

// TestClosed: after Close, a call is an ErrClosed result; a run in
// progress is stopped.
func TestClosed(t *testing.T) {
	tool := newTool(t, nil)
	ctx := context.Background()
	done := make(chan *codetool.Result)
	go func() { done <- tool.Call(ctx, "x", args("while True: pass")) }()
	require.Eventually(t, func() bool { return tool.Sessions() == 1 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, tool.Close())
	r := <-done
	assert.True(t, r.IsError)
	r = tool.Call(ctx, "x", args("1"))
	assert.ErrorIs(t, r.Err, codetool.ErrClosed)
	assert.True(t, errors.Is(r.Err, codetool.ErrClosed))
}

// FuzzParseInput: any bytes a model sends parse or are an ErrBadArguments;
// parsed code is never empty nor past the cap.
func FuzzParseInput(f *testing.F) {
	for _, s := range []string{`{"code": "1"}`, `{"code": "x", "timeout_ms": 5}`, `{"code": 1}`, `{`, `{"code": "a"} x`, `{"CODE": "1"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := codetool.ParseInput(b, 64)
		if err != nil {
			require.ErrorIs(t, err, codetool.ErrBadArguments)
			return
		}
		require.NotEmpty(t, strings.TrimSpace(in.Code))
		require.LessOrEqual(t, len(in.Code), 64)
	})
}

// TestOnOutputStreams: OnOutput gets a call's output line by line while
// the run goes on, with the conversation and the stream, all of it even
// past the Result's limit.
func TestOnOutputStreams(t *testing.T) {
	var mu sync.Mutex
	var got []string
	tool := newTool(t, &codetool.Options{Limits: sandbox.Limits{MaxOutput: 2048}, OnOutput: func(conv, stream, text string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, conv+" "+stream+" "+text)
	}})
	r := tool.Call(context.Background(), "c1", args("import sys\nfor i in range(500): print('row', i)\nprint('oops', file=sys.stderr)"))
	require.False(t, r.IsError, r.Text())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 501)
	assert.Equal(t, "c1 stdout row 0\n", got[0])
	assert.Equal(t, "c1 stdout row 499\n", got[499])
	assert.Equal(t, "c1 stderr oops\n", got[500])
	assert.Contains(t, r.Truncated, "stdout", "the Result is still cut to its limit")
}
