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
	s, err := sandboxtest.Python(t).NewSession(ctx, nil)
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
// submit; Thread.start runs the target to its end, as the thread it is
// (current_thread, is_alive, join, an exception printed as a thread's);
// a wait no other thread could end raises RuntimeError instead of hanging.
func TestCompatThreads(t *testing.T) {
	code := `
from concurrent.futures import ThreadPoolExecutor
import threading, queue, sys
order = []
with ThreadPoolExecutor(4) as ex:
    f = ex.submit(order.append, 1)
    order.append(2)
    print(f.done(), order, list(ex.map(abs, [-1, -2])))
seen = []
ts = [threading.Thread(target=lambda i=i: seen.append((i, threading.current_thread().name)), name="w%d" % i) for i in range(2)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(seen, [t.is_alive() for t in ts], "stopped" in repr(ts[0]), threading.current_thread().name)
sys.stderr = sys.stdout
t = threading.Thread(target=lambda: 1 / 0, name="boom")
t.start()
t.join()
q = queue.Queue()
threading.Thread(target=q.put, args=(5,)).start()
print(q.get())
lock = threading.Lock()
lock.acquire()
print(lock.acquire(timeout=0.01), threading.Event().wait(0.01))
for wait in (q.get, lock.acquire, threading.Event().wait, threading.Semaphore(0).acquire):
    try:
        wait()
    except RuntimeError as e:
        print("would wait forever" in str(e))
`
	want := "True [1, 2] [1, 2]\n[(0, 'w0'), (1, 'w1')] [False, False] True MainThread\n" +
		"Exception in thread boom:\n"
	for _, out := range compatRun(t, code) {
		assert.True(t, strings.HasPrefix(out, want), out)
		assert.Contains(t, out, "ZeroDivisionError")
		assert.True(t, strings.HasSuffix(out, "\n5\nFalse False\nTrue\nTrue\nTrue\nTrue\n"), out)
	}
}

// TestCompatMultiprocessing: multiprocessing's Pool, Process, Queue, Value,
// Lock and Pipe, and ProcessPoolExecutor, run their work inline.
func TestCompatMultiprocessing(t *testing.T) {
	code := `
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing.pool import ThreadPool
def sq(x):
    return x * x
def add(a, b):
    return a + b
def child(q, v, lock):
    with lock:
        v.value += 1
    q.put(mp.current_process().name)
if __name__ == "__main__":
    with mp.Pool(4) as p:
        r = p.apply_async(sq, (7,))
        print(p.map(sq, range(4)), list(p.imap(sq, [2])), p.starmap(add, [(1, 2)]), r.get(1))
    with ProcessPoolExecutor(2) as ex:
        fs = [ex.submit(sq, i) for i in range(3)]
        print(sorted(f.result() for f in as_completed(fs)), list(ex.map(sq, [4])))
    q, v, lock = mp.Queue(), mp.Value("i", 0), mp.Lock()
    ps = [mp.Process(target=child, args=(q, v, lock)) for _ in range(2)]
    for x in ps:
        x.start()
    for x in ps:
        x.join()
    print([x.exitcode for x in ps], v.value, q.get(), q.get(), ps[0].is_alive())
    p = mp.Process(target=exit, args=(3,))
    p.start(); p.join()
    a, b = mp.Pipe()
    a.send("ping")
    with mp.get_context("spawn").Pool(2) as pool, ThreadPool(2) as tp:
        print(p.exitcode, b.recv(), pool.map(sq, [5]), tp.map(sq, [6]))
`
	want := "[0, 1, 4, 9] [4] [3] 49\n[0, 1, 4] [16]\n[0, 0] 2 Process-1 Process-2 False\n3 ping [25] [36]\n"
	for _, out := range compatRun(t, code) {
		assert.Equal(t, want, out)
	}
}

// TestCompatAlarm: signal.alarm and setitimer deliver SIGALRM to the
// handler at the time asked (never before it; how late depends on the
// machine's load: see ARCHITECTURE.md for figures): a watchdog stops a loop,
// a sleep and a thread's target (its exception is the program's, not the
// thread's), an interval timer repeats, and without a handler the program
// ends as the kernel would end it (status 142).
func TestCompatAlarm(t *testing.T) {
	code := `
import signal, time
class Timeout(Exception):
    pass
def handler(sig, frame):
    raise Timeout
signal.signal(signal.SIGALRM, handler)
t0 = time.monotonic()
signal.alarm(1)
try:
    while True:
        pass
except Timeout:
    print("loop", time.monotonic() - t0 >= 1)
t0 = time.monotonic()
signal.setitimer(signal.ITIMER_REAL, 0.05)
try:
    time.sleep(10)
except Timeout:
    print("sleep", 0.05 <= time.monotonic() - t0 < 10)
import threading
def spin():
    while True:
        pass
signal.setitimer(signal.ITIMER_REAL, 0.05)
try:
    threading.Thread(target=spin).start()
except Timeout:
    print("thread", signal.getsignal(signal.SIGALRM) is handler)
hits = []
signal.signal(signal.SIGALRM, lambda s, f: hits.append(s))
signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
while len(hits) < 3:
    time.sleep(0.01)
print(signal.setitimer(signal.ITIMER_REAL, 0)[1], signal.alarm(5), signal.alarm(0))
`
	for _, out := range compatRun(t, code) {
		assert.Equal(t, "loop True\nsleep True\nthread True\n0.02 0 5\n", out)
	}

	res, err := sandboxtest.Python(t).Run(context.Background(), "import signal\nsignal.setitimer(signal.ITIMER_REAL, 0.01)\nwhile True: pass", nil)
	var exit *sandbox.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 142, exit.Code)
	assert.Contains(t, string(res.Stderr), "signal 14")
}

// TestCompatAlarmDeterministic: in deterministic mode the alarm follows the
// deterministic clock, so it stops a loop at the same point of every run.
func TestCompatAlarmDeterministic(t *testing.T) {
	code := `
import signal, time
def handler(sig, frame):
    raise TimeoutError
signal.signal(signal.SIGALRM, handler)
n = 0
signal.setitimer(signal.ITIMER_REAL, 0.2)
try:
    while True:
        n += 1
except TimeoutError:
    print(n, time.monotonic_ns())
`
	py := sandboxtest.Python(t)
	var outs []string
	for range 2 {
		res, err := runDeterministic(t, py, code, 1)
		require.NoError(t, err, "%s", res.Stderr)
		outs = append(outs, string(res.Stdout))
	}
	assert.Equal(t, outs[0], outs[1])
	var n, ns int64
	_, err := fmt.Sscan(outs[0], &n, &ns)
	require.NoError(t, err)
	assert.Greater(t, n, int64(1000))
}

// TestCompatMmap: mmap of a regular file reads it and writes back on flush
// and close; ACCESS_READ refuses writes, ACCESS_COPY keeps them; a map
// written to whose file was closed first (WASI has no dup) says so and
// writes nothing.
func TestCompatMmap(t *testing.T) {
	code := `
import mmap, re
with open("/work/m.bin", "wb") as f:
    f.write(b"hello world\nsecond line\nthird")
with open("/work/m.bin", "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    print(len(m), m[:5], m[0], m.find(b"world"), m.readline(), m.readline())
    m[0:5] = b"HELLO"
    m.flush()
    print(open("/work/m.bin", "rb").read(5))
    m.seek(6)
    m.write(b"W")
    m.close()
print(open("/work/m.bin", "rb").read(11), m.closed)
with open("/work/m.bin", "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as r:
    print(re.search(rb"sec\w+", r).group(), bytes(memoryview(r)[:3]))
    try:
        r[0] = 1
    except TypeError:
        print("read-only")
with open("/work/m.bin", "r+b") as f:
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as c:
        c[0:1] = b"x"
        print(c[:2])
print(open("/work/m.bin", "rb").read(2))
with open("/work/m.bin", "r+b") as f:
    late = mmap.mmap(f.fileno(), 0)
    late[0:1] = b"h"
try:
    late.close()
except OSError as e:
    print("file closed first", e.errno, late.closed, open("/work/m.bin", "rb").read(2))
`
	want := "29 b'hello' 104 6 b'hello world\\n' b'second line\\n'\nb'HELLO'\nb'HELLO World' True\n" +
		"b'second' b'HEL'\nread-only\nb'xE'\nb'HE'\nfile closed first 9 True b'HE'\n"
	for _, out := range compatRun(t, code) {
		assert.Equal(t, want, out)
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

	s, err := sandboxtest.Python(t).NewSession(ctx, nil)
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
	s, err := sandboxtest.Python(t).NewSession(ctx, &sandbox.Config{Env: map[string]string{"PYTHONPATH": "/work/lib:/work/more"}})
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

// TestCompatPyplotShow: plt.show() on the Agg backend saves each open
// figure to /work/figure-N.png, numbered on across calls, and closes them;
// with no figure, or another backend, it is matplotlib's own. The
// matplotlib here is a stand-in with pyplot's names, so the hook is tested
// on every guest (the data variant's tests run the real one).
func TestCompatPyplotShow(t *testing.T) {
	code := `
import os, sys
os.makedirs("/tmp/fake/matplotlib", exist_ok=True)
open("/tmp/fake/matplotlib/__init__.py", "w").write("")
open("/tmp/fake/matplotlib/pyplot.py", "w").write('''
backend = "agg"
figs = {}
class Figure:
    def __init__(self, n): self.n = n
    def savefig(self, path): open(path, "w").write("figure %d" % self.n)
def figure(num=None):
    num = num or len(figs) + 1
    return figs.setdefault(num, Figure(num))
def get_fignums(): return sorted(figs)
def get_backend(): return backend
def close(which): figs.clear()
def show(*args, **kwargs): print("matplotlib's show", args, kwargs)
''')
sys.path.insert(0, "/tmp/fake")
import matplotlib.pyplot as plt
plt.figure(); plt.figure()
plt.show()
print(sorted(f for f in os.listdir("/work") if f.startswith("figure")), plt.get_fignums())
print(open("/work/figure-2.png").read())
plt.figure()
plt.show()
plt.show(block=False)
plt.backend = "tkagg"
plt.figure()
plt.show()
`
	want := "plt.show(): figure saved to /work/figure-1.png\n" +
		"plt.show(): figure saved to /work/figure-2.png\n" +
		"['figure-1.png', 'figure-2.png'] []\n" +
		"figure 2\n" +
		"plt.show(): figure saved to /work/figure-3.png\n" +
		"matplotlib's show () {'block': False}\n" +
		"matplotlib's show () {}\n"
	for _, out := range compatRun(t, code) {
		assert.Equal(t, want, out)
	}
}
