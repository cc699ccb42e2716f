package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/netpolicy"
	"github.com/fumehood/fumehood/sandbox"
)

// compatRun runs code one-shot and in a fresh session and returns the
// stdout and stderr of each, failing the test if either run fails.
func compatRun(t *testing.T, code string) (outs []string) {
	t.Helper()
	ctx := context.Background()
	res, err := sandboxtest.Python(t).Run(ctx, code, nil)
	require.NotNil(t, res)
	require.NoError(t, err, "one-shot: %s", res.Stderr)
	outs = append(outs, string(res.Stdout))
	s, err := sandboxtest.PythonSessions(t).NewSession(ctx, nil)
	require.NoError(t, err)
	defer s.Close()
	res, err = s.Run(ctx, code, nil)
	require.NotNil(t, res)
	require.NoError(t, err, "session: %s", res.Stderr)
	return append(outs, string(res.Stdout))
}

// TestCompatAsyncio: asyncio runs without a self-pipe (issue 18): run,
// gather, sleep, wait_for, Queue, to_thread and run_in_executor.
func TestCompatAsyncio(t *testing.T) {
	code := `
import asyncio
async def sq(x):
    await asyncio.sleep(0.001)
    return x * x
async def main():
    q = asyncio.Queue()
    await q.put(3)
    r = await asyncio.gather(sq(1), sq(2), sq(await q.get()))
    try:
        await asyncio.wait_for(asyncio.sleep(5), 0.01)
    except TimeoutError:
        r.append("timeout")
    r.append(await asyncio.to_thread(sum, [1, 2]))
    r.append(await asyncio.get_running_loop().run_in_executor(None, max, 4, 5))
    return r
print(asyncio.run(main()))
print(asyncio.run(sq(7)))
`
	for _, out := range compatRun(t, code) {
		assert.Equal(t, "[1, 4, 9, 'timeout', 3, 5]\n49\n", out)
	}
}

// TestCompatThreads: ThreadPoolExecutor runs tasks in the calling thread at
// submit; Thread.start says the sandbox has one thread.
func TestCompatThreads(t *testing.T) {
	code := `
from concurrent.futures import ThreadPoolExecutor
import threading
order = []
with ThreadPoolExecutor(4) as ex:
    f = ex.submit(order.append, 1)
    order.append(2)
    print(f.done(), order, list(ex.map(abs, [-1, -2])))
try:
    threading.Thread(target=print).start()
except RuntimeError as e:
    print("one thread" in str(e), "ThreadPoolExecutor" in str(e))
`
	for _, out := range compatRun(t, code) {
		assert.Equal(t, "True [1, 2] [1, 2]\nTrue True\n", out)
	}
}

// TestCompatBatteries: hostname, a pwd entry, a home and a user name for
// the sandbox, with the environment left empty.
func TestCompatBatteries(t *testing.T) {
	code := `
import os, socket, pwd, getpass, pathlib, email.utils
print(socket.gethostname(), socket.getfqdn(), pwd.getpwuid(0).pw_name, pwd.getpwnam("sandbox").pw_dir)
print(getpass.getuser(), pathlib.Path.home(), os.path.expanduser("~/a"), os.path.expanduser("~other"))
print(email.utils.make_msgid().endswith("@sandbox>"), dict(os.environ))
`
	for _, out := range compatRun(t, code) {
		assert.Equal(t, "sandbox sandbox sandbox /work\nsandbox /work /work/a ~other\nTrue {}\n", out)
	}
}

// TestCompatLocale: locale is "C" and says so: setlocale refuses a locale
// the sandbox does not have (WASI's C library would accept any name and
// change nothing), accepts C, POSIX and C.UTF-8, and LANG naming a missing
// locale makes setlocale(LC_ALL, "") fail as it does on a system without it.
func TestCompatLocale(t *testing.T) {
	code := `
import locale, os, time
for name in ("fr_FR.UTF-8", ("de_DE", "UTF-8")):
    try:
        locale.setlocale(locale.LC_ALL, name)
        print("accepted", name)
    except locale.Error as e:
        print("refused", "C locale only" in str(e))
print(locale.setlocale(locale.LC_ALL, "C"), locale.setlocale(locale.LC_ALL, "POSIX"), locale.setlocale(locale.LC_NUMERIC, "C.UTF-8"))
print(locale.setlocale(locale.LC_ALL, "").split(";")[0], locale.getlocale(), locale.localeconv()["decimal_point"])
print(locale.format_string("%.2f", 1234.5, grouping=True), time.strftime("%A %B", time.gmtime(0)))
os.environ["LC_ALL"] = "fr_FR.UTF-8"
try:
    locale.setlocale(locale.LC_ALL, "")
    print("accepted LC_ALL")
except locale.Error:
    print("refused LC_ALL", locale.setlocale(locale.LC_ALL).split(";")[0])
`
	for _, out := range compatRun(t, code) {
		assert.Equal(t, "refused True\nrefused True\nC C C\nC.UTF-8 ('C', 'UTF-8') .\n1234.50 Thursday January\nrefused LC_ALL C.UTF-8\n", out)
	}
}

// TestCompatDiskUsage: shutil.disk_usage reports the mount's byte quota
// and the size of its files.
func TestCompatDiskUsage(t *testing.T) {
	code := `
import shutil
open("/work/f", "wb").write(b"x" * 1000)
u = shutil.disk_usage("/tmp")
print(u.total, u.used, u.free == u.total - u.used)
`
	want := fmt.Sprintf("%d 1000 True\n", sandbox.DefaultRootQuota.MaxBytes)
	for _, out := range compatRun(t, code) {
		assert.Equal(t, want, out)
	}
}

// TestCompatNetworkOff: without a network policy, urllib, http.client and
// socket raise PermissionError naming the missing policy.
func TestCompatNetworkOff(t *testing.T) {
	code := `
import socket, urllib.request, http.client
for f in (lambda: urllib.request.urlopen("https://example.com"),
          lambda: http.client.HTTPConnection("example.com").request("GET", "/"),
          lambda: socket.create_connection(("example.com", 80)),
          lambda: socket.getaddrinfo("example.com", 80)):
    try:
        f()
    except PermissionError as e:
        print("no network policy" in str(e), "sandbox.Config.Network" in str(e))
`
	for _, out := range compatRun(t, code) {
		assert.Equal(t, strings.Repeat("True True\n", 4), out)
	}
	// The message names the field that grants a policy: it must exist.
	f, ok := reflect.TypeOf(sandbox.Config{}).FieldByName("Network")
	require.True(t, ok, "sandbox.Config has no field Network")
	assert.Equal(t, reflect.TypeOf((*netpolicy.Policy)(nil)), f.Type)
}

// TestCompatTracebacks: a one-shot run's traceback shows the user's source
// lines, and a missing third-party module says the sandbox has the standard
// library only.
func TestCompatTracebacks(t *testing.T) {
	ctx := context.Background()
	res, err := sandboxtest.Python(t).Run(ctx, "def f():\n    return 1 // 0\nf()\n", nil)
	var exc *sandbox.Exception
	require.True(t, errors.As(err, &exc), "%v", err)
	assert.Equal(t, 1, res.ExitCode)
	assert.Contains(t, string(res.Stderr), "File \"<string>\", line 2, in f\n    return 1 // 0\n")
	assert.NotContains(t, string(res.Stderr), "fumehood")
	assert.Contains(t, exc.Traceback, "File \"<string>\", line 2, in f\n    return 1 // 0\n")
	assert.NotContains(t, exc.Traceback, "fumehood")

	named, err := sandboxtest.Python(t).NewSandbox(nil)
	require.NoError(t, err)
	defer named.Close()
	res, err = named.RunScript(ctx, "analysis.py", "import sys; print(sys.argv)\nimport pandas\n", nil, "x")
	require.Error(t, err)
	assert.Equal(t, "['analysis.py', 'x']\n", string(res.Stdout))
	assert.Contains(t, string(res.Stderr), "File \"analysis.py\", line 2, in <module>\n    import pandas\n")
	assert.Contains(t, string(res.Stderr), "No module named 'pandas'\nThe sandbox has Python's standard library only")
	require.True(t, errors.As(err, &exc), "%v", err)
	assert.Equal(t, "ModuleNotFoundError", exc.Type)
	assert.Contains(t, exc.Traceback, "standard library only")

	s, err := sandboxtest.PythonSessions(t).NewSession(ctx, nil)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Run(ctx, "import pandas", nil)
	exc = nil
	require.True(t, errors.As(err, &exc), "%v", err)
	assert.Contains(t, exc.Traceback, "standard library only")
}

// TestSessionPythonPath: PYTHONPATH from Config.Env reaches
// sys.path, after the script's directory, before the standard library.
func TestSessionPythonPath(t *testing.T) {
	ctx := context.Background()
	s, err := sandboxtest.PythonSessions(t).NewSession(ctx, &sandbox.Config{Env: map[string]string{"PYTHONPATH": "/work/lib:/work/more"}})
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Run(ctx, `
import os, sys
os.makedirs("/work/lib", exist_ok=True)
open("/work/lib/mymod.py", "w").write("X = 5\n")
import mymod
print(mymod.X, sys.path.index("/work/lib") < sys.path.index("/work/more") < [i for i, p in enumerate(sys.path) if "python3" in p][0])
`, nil)
	require.NoError(t, err, "%s", res.Stderr)
	assert.Equal(t, "5 True\n", string(res.Stdout))

	// One-shot runs: the interpreter reads PYTHONPATH itself.
	sb, err := sandboxtest.Python(t).NewSandbox(&sandbox.Config{Env: map[string]string{"PYTHONPATH": "/work"}})
	require.NoError(t, err)
	defer sb.Close()
	require.NoError(t, sb.Files().WriteFile("/work/mymod6.py", []byte("X = 6\n")))
	res, err = sb.Run(ctx, "import mymod6; print(mymod6.X)", nil)
	require.NoError(t, err, "%s", res.Stderr)
	assert.Equal(t, "6\n", string(res.Stdout))
}
