package cpython_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// builtRun runs Python code one-shot on the built guest (with fumehood's
// start-up code and the standard library at /usr) and returns its stdout
// and stderr, failing the test when the run fails.
func builtRun(t *testing.T, code string) (string, string) {
	t.Helper()
	built(t)
	ctx := context.Background()
	g, err := sandbox.CompilePython(ctx, nil)
	require.NoError(t, err)
	defer g.Close()
	res, err := g.Run(ctx, code, &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 5 * time.Minute}})
	require.NotNil(t, res, "%v", err)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	return string(res.Stdout), string(res.Stderr)
}

// TestBuiltGuestDeepRecursion: recursion through C in the built guest is a
// RecursionError, never a trap, up to CPython's C recursion limit and past
// it, for the paths agent code takes (lru_cache, sum over a generator)
// and the costliest measured (a sort key that recurses); lru_cache's
// fib(200) and a DFS at depth 2,000 work.
func TestBuiltGuestDeepRecursion(t *testing.T) {
	out, _ := builtRun(t, `
import functools, sys
@functools.lru_cache(None)
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
print(fib(200))
sys.setrecursionlimit(100000)
graph = {i: [i + 1] for i in range(2000)}
graph[2000] = []
def dfs(v): return 1 + sum(dfs(w) for w in graph[v])
print(dfs(0))
@functools.lru_cache(None)
def deep(n): return 0 if n == 0 else deep(n - 1) + 1
def sortkey(n): return 0 if n == 0 else sorted([n], key=lambda x: sortkey(x - 1))[0]
def gen(n): return 0 if n == 0 else sum(gen(n - 1) for _ in range(1))
for f in (deep, sortkey, gen):
    try:
        f(100000)
        print(f.__name__, "returned")
    except RecursionError:
        print(f.__name__, "RecursionError")
`)
	assert.Equal(t, "280571172992510140037611932413038677189525\n2001\n"+
		"deep RecursionError\nsortkey RecursionError\ngen RecursionError\n", out)
}

// TestBuiltGuestBatteries: hashlib.pbkdf2_hmac and hashlib.scrypt (the
// guest's own C module; test vectors of RFC 6070 and 7914 and OpenSSL's
// output) with _hashlib's errors, lzma and time-zone data.
func TestBuiltGuestBatteries(t *testing.T) {
	out, _ := builtRun(t, `
import hashlib, lzma, zoneinfo, datetime
print("pbkdf2_hmac" in hashlib.__all__, hashlib.pbkdf2_hmac.__module__)
print(hashlib.pbkdf2_hmac("sha1", b"password", b"salt", 2, 20).hex())
print(hashlib.pbkdf2_hmac("sha256", b"password", b"salt", 4096, 32).hex())
print(hashlib.pbkdf2_hmac("SHA512", b"passwordPASSWORDpassword", b"saltSALTsaltSALTsaltSALTsaltSALTsalt", 1000).hex())
print(hashlib.scrypt(b"", salt=b"", n=16, r=1, p=1).hex())
print(hashlib.scrypt(b"password", salt=b"NaCl", n=1024, r=8, p=16).hex())
for call in (lambda: hashlib.pbkdf2_hmac("md5", b"", b"", 1), lambda: hashlib.pbkdf2_hmac("sha1", b"", b"", 0),
             lambda: hashlib.scrypt(b"", salt=b"", n=3, r=1, p=1), lambda: hashlib.scrypt(b"", salt=b"", n=2**20, r=8, p=1)):
    try:
        call()
    except ValueError as e:
        print("ValueError", e)
data = b"fumehood " * 1000
print(lzma.decompress(lzma.compress(data)) == data)
print(datetime.datetime(2025, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")).utcoffset())
`)
	assert.Equal(t, "True _fumehood_kdf\n"+
		"ea6c014dc72d6f8ccd1ed92ace1d41f0d8de8957\n"+
		"c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a\n"+
		"0e28f3efa802a2f0cd3b4ace5e3d9afadb7c2dccc5ef10eedb8a6564dfb0c9a63b6f46b1e150587b9fe7875cfaf999d00b454bb7d74295c60df1bbe5f8f36da1\n"+
		"77d6576238657b203b19ca42c18a0497f16b4844e3074ae8dfdffa3fede21442fcd0069ded0948f8326a753a0fc81f17e8d3e0fb2e0d3628cf35e20c38d18906\n"+
		"fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b3731622eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640\n"+
		"ValueError unsupported hash type\n"+
		"ValueError iteration value must be greater than 0.\n"+
		"ValueError n must be a power of 2.\n"+
		"ValueError Invalid parameter combination for n, r, p, maxmem.\n"+
		"True\n2:00:00\n", out)
}

// TestBuiltGuestStdlibSources: a traceback through the standard library
// names its file under /usr and shows the source line, and inspect finds
// the standard library's source (the .py files in the zip).
func TestBuiltGuestStdlibSources(t *testing.T) {
	out, _ := builtRun(t, `
import inspect, json, traceback
try:
    json.loads("{")
except ValueError:
    print(traceback.format_exc())
print(inspect.getsource(json.dumps).splitlines()[0])
`)
	assert.Contains(t, out, `File "/usr/lib/python313.zip/json/decoder.py", line 361, in raw_decode`+"\n    obj, end = self.scan_once(s, idx)\n")
	assert.Contains(t, out, "def dumps(obj, *, skipkeys=False, ensure_ascii=True, check_circular=True,\n")
}
