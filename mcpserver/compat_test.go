package mcpserver_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/runtool"
	"github.com/fumehood/fumehood/mcpserver"
	"github.com/fumehood/fumehood/netpolicy"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/wasi"
)

// pngCode writes a 4×4 red PNG to /work/chart.png and shows its SHA-256.
const pngCode = `
import zlib, struct, hashlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
raw = b"".join(b"\x00" + b"\xff\x00\x00" * 4 for _ in range(4))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
open("/work/chart.png", "wb").write(png)
hashlib.sha256(png).hexdigest()
`

type filesOut struct {
	Size      *int64 `json:"size"`
	Encoding  string `json:"encoding"`
	MediaType string `json:"media_type"`
	Truncated bool   `json:"truncated"`
}

// TestBinaryFiles: session_files reads a PNG the guest wrote back intact,
// as MCP image content; other binary bytes as base64 text; text as text.
// A caller writes binary bytes in base64 (session_files, run_python's
// binary_files). Binary content used to come back as text, each invalid
// byte a U+FFFD. Reads stay within MaxOutput bytes as sent.
func TestBinaryFiles(t *testing.T) {
	py := sandboxtest.Python(t)
	const limit = 4096
	srv, err := mcpserver.New(py, &mcpserver.Options{Limits: sandbox.Limits{MaxOutput: limit}})
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)
	id := create(t, cs)
	run := func(code string) string {
		t.Helper()
		res := call(t, cs, "session_run", map[string]any{"session_id": id, "code": code}, nil)
		require.False(t, res.IsError, text(res))
		return valueOf(t, res)
	}
	read := func(path string) (*mcp.CallToolResult, filesOut) {
		t.Helper()
		var out filesOut
		res := call(t, cs, "session_files", map[string]any{"session_id": id, "op": "read", "path": path}, &out)
		require.False(t, res.IsError, text(res))
		return res, out
	}

	// A PNG comes back as an image, byte for byte.
	sum := strings.Trim(run(pngCode), "'")
	res, out := read("/work/chart.png")
	require.Len(t, res.Content, 1)
	img, ok := res.Content[0].(*mcp.ImageContent)
	require.True(t, ok, "%T", res.Content[0])
	assert.Equal(t, "image/png", img.MIMEType)
	got := sha256.Sum256(img.Data)
	assert.Equal(t, sum, hex.EncodeToString(got[:]))
	assert.Equal(t, filesOut{Size: out.Size, Encoding: "base64", MediaType: "image/png"}, out)
	assert.Equal(t, int64(len(img.Data)), *out.Size)

	// Other binary bytes: base64 text, which decodes to them.
	run("open('/work/all.bin', 'wb').write(bytes(range(256)) * 2)")
	res, out = read("/work/all.bin")
	require.Len(t, res.Content, 1)
	data, err := base64.StdEncoding.DecodeString(res.Content[0].(*mcp.TextContent).Text)
	require.NoError(t, err)
	want := make([]byte, 512)
	for i := range want {
		want[i] = byte(i)
	}
	assert.Equal(t, want, data)
	assert.Equal(t, "base64", out.Encoding)
	assert.False(t, out.Truncated)

	// Text stays text, even cut inside a character.
	run("open('/work/t.txt', 'w').write('héllo\\n' * 1000)")
	res, out = read("/work/t.txt")
	assert.Equal(t, "utf-8", out.Encoding)
	assert.True(t, out.Truncated)
	assert.True(t, strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "héllo\nhéllo\n"))
	assert.LessOrEqual(t, len(res.Content[0].(*mcp.TextContent).Text), limit)

	// A large binary file (or image) is cut so that its base64 fits the limit, and said so.
	run("import os\nopen('/work/big.bin', 'wb').write(os.urandom(100_000))")
	res, out = read("/work/big.bin")
	require.Len(t, res.Content, 2)
	b64 := res.Content[0].(*mcp.TextContent).Text
	assert.LessOrEqual(t, len(b64), limit)
	data, err = base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	require.Len(t, data, 3072)
	head := sha256.Sum256(data)
	assert.True(t, run("import hashlib\nhashlib.sha256(open('/work/big.bin', 'rb').read(3072)).hexdigest()") == "'"+hex.EncodeToString(head[:])+"'")
	assert.Contains(t, res.Content[1].(*mcp.TextContent).Text, "/work/big.bin is 100000 bytes: only its start was sent")
	assert.True(t, out.Truncated)

	// Uploads: base64 bytes, with or without padding; text by default.
	upload := base64.StdEncoding.EncodeToString(want)
	for _, c := range []map[string]any{
		{"path": "/work/up/a.bin", "content": upload, "encoding": "base64"},
		{"path": "/work/up/b.bin", "content": strings.TrimRight(base64.StdEncoding.EncodeToString(want[:10]), "=")[:14], "encoding": "base64"},
		{"path": "/work/up/c.txt", "content": "plain é"},
	} {
		c["session_id"], c["op"] = id, "write"
		res := call(t, cs, "session_files", c, nil)
		require.False(t, res.IsError, text(res))
	}
	assert.Equal(t, "(True, True, 'plain é')", run("(open('/work/up/a.bin', 'rb').read() == bytes(range(256)) * 2, "+
		"open('/work/up/b.bin', 'rb').read() == bytes(range(10)), open('/work/up/c.txt').read())"))
	for _, bad := range []map[string]any{
		{"content": "not base64!", "encoding": "base64"},
		{"content": "x", "encoding": "latin-1"},
		{"op": "delete"},
	} {
		args := map[string]any{"session_id": id, "op": "write", "path": "/work/bad"}
		for k, v := range bad {
			args[k] = v
		}
		res := call(t, cs, "session_files", args, nil)
		assert.True(t, res.IsError, "%v", bad)
	}

	// run_python takes binary files too.
	res = call(t, cs, "run_python", map[string]any{"code": "open('/work/in.bin', 'rb').read() == bytes(range(256)) * 2, open('/work/in.txt').read()",
		"files": map[string]string{"/work/in.txt": "t"}, "binary_files": map[string]string{"/work/in.bin": upload}}, nil)
	require.False(t, res.IsError, text(res))
	assert.Equal(t, "(True, 't')", valueOf(t, res))
	res = call(t, cs, "run_python", map[string]any{"code": "1", "binary_files": map[string]string{"/work/in.bin": "%%%"}}, nil)
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), "binary_files")
}

// TestLargePrintSentOnce: a 2 MB print under the default 1 MiB output
// limit comes back once, in the text, which says it was cut; the response
// is about 1 MiB. It used to come back twice (text and structured, 2 MB),
// with only the structured part saying it was cut.
func TestLargePrintSentOnce(t *testing.T) {
	py := sandboxtest.Python(t)
	srv, err := mcpserver.New(py, nil)
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)
	var out struct {
		Truncated []string `json:"truncated"`
	}
	res := call(t, cs, "run_python", map[string]any{"code": "print('x' * 2_000_000)"}, &out)
	b, err := json.Marshal(res)
	require.NoError(t, err)
	t.Logf("response: %d bytes", len(b))
	assert.Greater(t, len(b), sandbox.DefaultMaxOutput)
	assert.Less(t, len(b), sandbox.DefaultMaxOutput+4096)
	assert.Equal(t, []string{"stdout"}, out.Truncated)
	assert.Contains(t, text(res), "(cut: stdout went past the output limit of 1048576 bytes, and part of it was dropped;")
	sc, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	assert.Less(t, len(sc), 200, string(sc))
}

// TestSchemasAndInstructions: closed sets are enums, descriptions say what
// each argument is, fuel gives its scale, and the instructions (from
// codetool) say what the sandbox has, for the network and mounts given.
func TestSchemasAndInstructions(t *testing.T) {
	py := sandboxtest.Python(t)
	dir := t.TempDir()
	host, err := wasi.HostDir(dir)
	require.NoError(t, err)
	mounts := []sandbox.Mount{{Path: "/data", FS: host, ReadOnly: true}}
	policy := &netpolicy.Policy{Allow: []netpolicy.Rule{{Scheme: "https", Host: "api.example.com"}}}
	srv, err := mcpserver.New(py, &mcpserver.Options{SnapshotDir: t.TempDir(), Limits: sandbox.Limits{Fuel: 5_000_000_000}, Mounts: mounts, Network: policy})
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)

	info, err := runtool.Probe(context.Background(), py)
	require.NoError(t, err)
	instructions := runtool.InstructionsFor(info, policy, mounts)
	assert.Contains(t, instructions, "/data (read-only)")
	assert.Contains(t, instructions, "only to https://api.example.com")
	assert.True(t, strings.HasPrefix(cs.InitializeResult().Instructions, instructions), cs.InitializeResult().Instructions)

	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	schemas := map[string]map[string]any{}
	for _, tool := range tools.Tools {
		b, err := json.Marshal(tool.InputSchema)
		require.NoError(t, err)
		var s struct {
			Properties map[string]any `json:"properties"`
		}
		require.NoError(t, json.Unmarshal(b, &s))
		schemas[tool.Name] = s.Properties
		if tool.Name == "run_python" {
			assert.Contains(t, tool.Description, instructions)
		}
		if tool.Name == "run_python" || tool.Name == "session_run" {
			assert.Contains(t, tool.Description, runtool.ResultShows)
			assert.Contains(t, tool.Description, runtool.FilesShown)
		}
		for name, p := range s.Properties {
			assert.NotEmpty(t, p.(map[string]any)["description"], "%s.%s", tool.Name, name)
		}
	}
	prop := func(tool, name, key string) any {
		p, ok := schemas[tool][name].(map[string]any)
		require.True(t, ok, "%s.%s", tool, name)
		return p[key]
	}
	assert.Equal(t, []any{"read", "write", "list"}, prop("session_files", "op", "enum"))
	assert.Equal(t, []any{"utf-8", "base64"}, prop("session_files", "encoding", "enum"))
	for _, tool := range []string{"run_python", "session_run"} {
		fuel := prop(tool, "fuel", "description").(string)
		assert.Contains(t, fuel, "WebAssembly instructions")
		assert.Contains(t, fuel, "the server's limit, and the default, is 5000000000")
		assert.Contains(t, fuel, "print(1) costs about 2 million")
		assert.Contains(t, prop(tool, "timeout_ms", "description"), "is 30000")
	}
	assert.NotContains(t, schemas["session_restore"], "session_id", "a restore makes a new session")
	assert.Contains(t, prop("session_restore", "name", "description"), "saved under with session_snapshot")
	assert.Equal(t, "the session to save", prop("session_snapshot", "session_id", "description"))
}

// TestMounts: the server's mounts are in every sandbox and session it
// makes: a read-only one refuses writes, a read-write one keeps them on
// the host, within its quota.
func TestMounts(t *testing.T) {
	py := sandboxtest.Python(t)
	in, outDir := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(in, "data.csv"), []byte("a,b\n1,2\n"), 0o644))
	ro, err := wasi.HostDir(in)
	require.NoError(t, err)
	rw, err := wasi.HostDir(outDir)
	require.NoError(t, err)
	srv, err := mcpserver.New(py, &mcpserver.Options{Mounts: []sandbox.Mount{
		{Path: "/data", FS: ro, ReadOnly: true},
		{Path: "/out", FS: rw, Quota: wasi.Quota{MaxBytes: 1 << 20, MaxFiles: 100}},
	}})
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)

	res := call(t, cs, "run_python", map[string]any{"code": "open('/data/data.csv').read()"}, nil)
	require.False(t, res.IsError, text(res))
	assert.Equal(t, `'a,b\n1,2\n'`, valueOf(t, res))
	res = call(t, cs, "run_python", map[string]any{"code": "open('/data/new', 'w')"}, nil)
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), "Read-only file system")
	_, err = os.Stat(filepath.Join(in, "new"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	id := create(t, cs)
	res = call(t, cs, "session_run", map[string]any{"session_id": id, "code": "open('/out/r.txt', 'w').write(open('/data/data.csv').read().upper())"}, nil)
	require.False(t, res.IsError, text(res))
	b, err := os.ReadFile(filepath.Join(outDir, "r.txt"))
	require.NoError(t, err)
	assert.Equal(t, "A,B\n1,2\n", string(b))
	res = call(t, cs, "session_run", map[string]any{"session_id": id, "code": "open('/out/big', 'wb').write(b'x' * (2 << 20))"}, nil)
	assert.True(t, res.IsError, "past the quota")
	assert.Contains(t, text(res), "No space left on device")
}

// TestReadOfAHugeSparseFile: a guest writes a 900 MiB sparse file on a
// volume, within its 1 GiB quota (a hole counts only as its size), and
// asks session_files for it. The server reads only what it sends: the
// call allocates a few MiB, not the file (it read the whole file, 900 MiB
// per call, before it cut it).
func TestReadOfAHugeSparseFile(t *testing.T) {
	py := sandboxtest.Python(t)
	vol, err := wasi.HostDir(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { vol.Close() })
	const limit = 64 << 10
	srv, err := mcpserver.New(py, &mcpserver.Options{Limits: sandbox.Limits{MaxOutput: limit},
		Mounts: []sandbox.Mount{{Path: "/data", FS: vol, Quota: wasi.Quota{MaxBytes: 1 << 30, MaxFiles: 10}}}})
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)
	id := create(t, cs)
	res := call(t, cs, "session_run", map[string]any{"session_id": id,
		"code": "f = open('/data/big', 'wb'); f.seek(900 << 20); f.write(b'x'); f.close()"}, nil)
	require.False(t, res.IsError, text(res))

	var file filesOut
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res = call(t, cs, "session_files", map[string]any{"session_id": id, "op": "read", "path": "/data/big"}, &file)
	runtime.ReadMemStats(&after)
	require.False(t, res.IsError, text(res))
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("read of a 900 MiB sparse file under a %d-byte limit: %.1f MiB allocated", limit, float64(allocated)/(1<<20))
	assert.Less(t, allocated, uint64(16<<20), "bytes allocated by the call")
	require.NotNil(t, file.Size)
	assert.Equal(t, int64(900<<20+1), *file.Size)
	assert.True(t, file.Truncated)
	assert.Equal(t, "base64", file.Encoding)
	assert.Len(t, res.Content[0].(*mcp.TextContent).Text, limit)
}

// TestRunAttachesImages: a run that draws a chart under /work gets it
// back in its result, as the code tool does: PNG as image content (byte
// for byte), SVG as text, every new or changed file listed in the text.
func TestRunAttachesImages(t *testing.T) {
	py := sandboxtest.Python(t)
	srv, err := mcpserver.New(py, nil)
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)
	id := create(t, cs)
	code := pngCode + "\nopen('/work/c.svg', 'w').write('<svg/>')\nopen('/work/data.csv', 'w').write('a,b')\nopen('/tmp/t', 'w').write('x')\n" +
		"hashlib.sha256(png).hexdigest()"
	for _, tool := range []string{"run_python", "session_run"} {
		args := map[string]any{"code": code}
		if tool == "session_run" {
			args["session_id"] = id
		}
		res := call(t, cs, tool, args, nil)
		require.False(t, res.IsError, text(res))
		require.Len(t, res.Content, 3, tool)
		img, ok := res.Content[2].(*mcp.ImageContent)
		require.True(t, ok, "%s: %T", tool, res.Content[2])
		assert.Equal(t, "image/png", img.MIMEType)
		got := sha256.Sum256(img.Data)
		assert.Equal(t, "'"+hex.EncodeToString(got[:])+"'", valueOf(t, res), tool)
		assert.Equal(t, "/work/c.svg (image/svg+xml):\n<svg/>", res.Content[1].(*mcp.TextContent).Text)
		txt := res.Content[0].(*mcp.TextContent).Text
		assert.Contains(t, txt, "files:\n  /work/c.svg (6 bytes, image/svg+xml, attached)\n  /work/chart.png (")
		assert.Contains(t, txt, "  /work/data.csv (3 bytes)\n")
		assert.NotContains(t, txt, "/tmp/t")
	}
	// Unchanged files are not listed again.
	res := call(t, cs, "session_run", map[string]any{"session_id": id, "code": "1"}, nil)
	assert.Equal(t, "value: 1\n", text(res))
	assert.Len(t, res.Content, 1)
}

// TestRunAttachesMatplotlibChart: on the data variant, a matplotlib chart
// shown with plt.show() comes back from run_python as MCP image content,
// a PNG of the size asked for.
func TestRunAttachesMatplotlibChart(t *testing.T) {
	py := sandboxtest.Variant(t, cpython.Data)
	srv, err := mcpserver.New(py, nil)
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)
	res := call(t, cs, "run_python", map[string]any{"code": "import matplotlib.pyplot as plt\n" +
		"plt.figure(figsize=(4, 3), dpi=100)\nplt.plot(range(1000))\nplt.show()"}, nil)
	require.False(t, res.IsError, text(res))
	var img *mcp.ImageContent
	for _, c := range res.Content {
		if i, ok := c.(*mcp.ImageContent); ok {
			img = i
		}
	}
	require.NotNil(t, img, text(res))
	assert.Equal(t, "image/png", img.MIMEType)
	cfg, err := png.DecodeConfig(bytes.NewReader(img.Data))
	require.NoError(t, err)
	assert.Equal(t, [2]int{400, 300}, [2]int{cfg.Width, cfg.Height})
	assert.Contains(t, text(res), "/work/figure-1.png")
}
