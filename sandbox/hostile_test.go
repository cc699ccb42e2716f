package sandbox_test

import (
	"context"
	"fmt"
	"github.com/fumehood/fumehood/wasi"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// attemptPy prints, for each attempt, its label and what happened: "OK"
// and the value, or the exception's name and errno name.
const attemptPy = `
import errno, os, sys
def attempt(label, f):
    try:
        print(label, "OK", repr(f())[:60])
    except BaseException as e:
        code = getattr(e, "errno", None)
        print(label, type(e).__name__, errno.errorcode.get(code, "") if code else "")
`

// hostileCase is one hostile program run by TestHostilePython.
type hostileCase struct {
	name   string
	code   string
	cfg    *sandbox.RunOptions
	mounts func(t *testing.T) []sandbox.Mount
	check  func(t *testing.T, res *sandbox.Result, err error)
	slow   bool // skipped with -short

	// deterministic runs the case in a deterministic sandbox.
	deterministic bool
}

// wantLines checks a run that succeeded and printed exactly want.
func wantLines(want ...string) func(*testing.T, *sandbox.Result, error) {
	return func(t *testing.T, res *sandbox.Result, err error) {
		require.NoError(t, err, "stderr: %s", res.Stderr)
		assert.Equal(t, strings.Join(want, "\n")+"\n", string(res.Stdout))
	}
}

// wantPythonError checks a run that ended with an uncaught exception,
// which the text exception (its type, and maybe its message) shows.
func wantPythonError(exception string) func(*testing.T, *sandbox.Result, error) {
	return func(t *testing.T, res *sandbox.Result, err error) {
		var exc *sandbox.Exception
		require.ErrorAs(t, err, &exc)
		assert.Equal(t, 1, res.ExitCode)
		assert.Contains(t, exc.Type+": "+exc.Message, exception)
		assert.Contains(t, string(res.Stderr), exception)
	}
}

// wantStop checks a run stopped by the host for reason.
func wantStop(reason error) func(*testing.T, *sandbox.Result, error) {
	return func(t *testing.T, res *sandbox.Result, err error) {
		require.ErrorIs(t, err, reason)
		assert.Equal(t, -1, res.ExitCode)
	}
}

const hostSecretEnv = "FUMEHOOD_HOSTILE_SECRET"

func hostileCases(secretFile string) []hostileCase {
	const fuel = 1_000_000_000
	return []hostileCase{
		{name: "traversal", code: attemptPy + `
attempt("dotdot", lambda: open("/../../../../etc/passwd").read())
attempt("tmp-dotdot", lambda: open("/tmp/../../etc/hostname").read())
attempt("relative", lambda: open("../../../etc/passwd").read())
os.chdir("/tmp")
attempt("chdir-up", lambda: [os.chdir("..") for _ in range(10)])
attempt("cwd", lambda: os.getcwd())
attempt("root", lambda: sorted(os.listdir("/")))
`, check: wantLines("dotdot PermissionError EPERM", "tmp-dotdot PermissionError EPERM", "relative PermissionError EPERM",
			"chdir-up PermissionError EPERM", "cwd OK '/tmp/..'", "root OK ['tmp', 'work']")},

		{name: "proc and dev", code: attemptPy + `
for p in ["/proc/self/environ", "/proc/self/maps", "/proc/1/root/etc/passwd", "/dev/mem", "/dev/null", "/dev/urandom", "/sys/kernel"]:
    attempt(p, lambda: open(p, "rb").read(1))
`, check: wantLines("/proc/self/environ FileNotFoundError ENOENT", "/proc/self/maps FileNotFoundError ENOENT",
			"/proc/1/root/etc/passwd FileNotFoundError ENOENT", "/dev/mem FileNotFoundError ENOENT",
			// /dev/null is the guest's own (wasi.Options.DevNull): it reads empty.
			"/dev/null OK b''", "/dev/urandom FileNotFoundError ENOENT", "/sys/kernel FileNotFoundError ENOENT")},

		{name: "host files by absolute path", code: attemptPy + fmt.Sprintf(`
attempt("file", lambda: open(%[1]q).read())
attempt("dir", lambda: os.listdir(%[2]q))
attempt("etc", lambda: open("/etc/passwd").read())
attempt("home", lambda: os.listdir(os.path.expanduser("~")))
`, secretFile, filepath.Dir(secretFile)), check: wantLines("file FileNotFoundError ENOENT", "dir FileNotFoundError ENOENT",
			"etc FileNotFoundError ENOENT", "home OK []")}, // ~ is the sandbox's own /work

		{name: "symlinks out of a volume", mounts: func(t *testing.T) []sandbox.Mount {
			return []sandbox.Mount{{Path: "/data", FS: hostDir(t, t.TempDir()), Quota: wasi.Quota{MaxBytes: 1 << 30, MaxFiles: 100_000}}}
		}, code: attemptPy + fmt.Sprintf(`
attempt("absolute", lambda: os.symlink(%[1]q, "/data/abs"))
attempt("relative", lambda: os.symlink("../../../../../../../../" + %[1]q, "/data/rel"))
attempt("read-rel", lambda: open("/data/rel").read())
attempt("dir-link", lambda: os.symlink("../../../../../../..", "/data/up"))
attempt("list-up", lambda: os.listdir("/data/up"))
attempt("hardlink", lambda: os.link(%[1]q, "/data/hard"))
`, secretFile), check: wantLines("absolute PermissionError EPERM", "relative OK None", "read-rel FileNotFoundError ENOENT",
			"dir-link OK None", "list-up OK ['rel', 'up']", "hardlink OSError ENOSYS")},

		{name: "host environment", code: `import os; print(dict(os.environ), os.getenv("` + hostSecretEnv + `"))`,
			check: wantLines("{} None")},

		{name: "sockets", code: attemptPy + `
import socket
attempt("tcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
attempt("pair", lambda: socket.socketpair())
attempt("connect", lambda: socket.create_connection(("127.0.0.1", 22), timeout=1))
`, check: wantLines("tcp OSError ENOTSUP", "udp OSError ENOTSUP", "pair OSError ENOTSUP", "connect PermissionError ")},

		{name: "threads and processes", code: attemptPy + `
import threading, _thread, subprocess
attempt("thread", lambda: threading.Thread(target=int).start())  # runs inline
attempt("_thread", lambda: _thread.start_new_thread(print, ()))
attempt("subprocess", lambda: subprocess.run(["/bin/sh", "-c", "id"]))
attempt("popen", lambda: os.popen("id").read())
attempt("fork", lambda: os.fork())
attempt("exec", lambda: os.execv("/bin/sh", ["sh"]))
attempt("kill", lambda: os.kill(1, 9))
attempt("ctypes", lambda: __import__("ctypes"))
try:  # the guest's multiprocessing runs the target inline
    import multiprocessing
    pids = []
    multiprocessing.Process(target=lambda: pids.append(os.getpid())).start()
    print("multiprocessing", "no process" if pids == [os.getpid()] else "started")
except ImportError:
    print("multiprocessing no process")
`, check: wantLines("thread OK None", "_thread RuntimeError ", "subprocess OSError ENOTSUP", "popen OSError ENOTSUP",
			"fork AttributeError ", "exec AttributeError ", "kill AttributeError ", "ctypes ModuleNotFoundError ",
			"multiprocessing no process")},

		{name: "CPU bomb", code: "while True: pass", cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: fuel}},
			check: wantStop(sandbox.ErrFuelExhausted)},
		{name: "CPU bomb in C code", code: "import re\nre.match(r'(a+)+$', 'a' * 64 + '!')", cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: fuel}},
			check: wantStop(sandbox.ErrFuelExhausted)},
		{name: "CPU bomb past its deadline", code: "import re\nre.match(r'(a+)+$', 'a' * 64 + '!')",
			cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 300 * time.Millisecond, Fuel: sandbox.UnlimitedFuel}}, check: wantStop(context.DeadlineExceeded)},

		{name: "memory bomb", code: "x = [0] * (50 << 20)", cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 64 << 20}},
			check: func(t *testing.T, res *sandbox.Result, err error) {
				require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
				wantPythonError("MemoryError")(t, res, err)
				assert.LessOrEqual(t, res.PeakMemory, int64(64<<20))
			}},
		{name: "memory bomb, growing", code: "l = []\nwhile True: l.append(bytearray(1 << 20))", cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 64 << 20}},
			check: func(t *testing.T, res *sandbox.Result, err error) {
				require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
				assert.LessOrEqual(t, res.PeakMemory, int64(64<<20))
			}},

		{name: "output bomb", code: "import sys\nwhile True: sys.stdout.write('x' * 65536)",
			cfg: &sandbox.RunOptions{StopAtOutputLimit: true}, check: func(t *testing.T, res *sandbox.Result, err error) {
				wantStop(sandbox.ErrOutputLimit)(t, res, err)
				assert.Len(t, res.Stdout, sandbox.DefaultMaxOutput)
			}},
		{name: "output flood, dropped", code: "import sys\nwhile True: sys.stderr.write('e' * 4096)", cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: fuel}},
			check: func(t *testing.T, res *sandbox.Result, err error) {
				wantStop(sandbox.ErrFuelExhausted)(t, res, err)
				assert.LessOrEqual(t, len(res.Stderr), sandbox.DefaultMaxOutput)
				assert.Greater(t, len(res.Stderr), sandbox.DefaultMaxOutput-100, "the start and the end fill the limit")
				assert.Contains(t, string(res.Stderr), " bytes dropped ...]\n")
				assert.True(t, res.StderrTruncated)
				assert.Greater(t, res.StderrBytes, int64(sandbox.DefaultMaxOutput))
			}},

		{name: "deep Python recursion, raised limit", code: "import sys\nsys.setrecursionlimit(10**5)\ndef f(n): return f(n + 1)\nf(0)",
			check: wantPythonError("RecursionError")},
		{name: "deep Python recursion, unbounded", code: "import sys\nsys.setrecursionlimit(10**8)\ndef f(n): return f(n + 1)\nf(0)",
			cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: fuel}}, check: wantStop(sandbox.ErrFuelExhausted)},
		{name: "deep Python recursion, default limit", code: "def f(n): return f(n + 1)\nf(0)", check: wantPythonError("RecursionError")},
		{name: "deep nesting in C: json", code: "import json\njson.loads('[' * 10**6)", check: wantPythonError("RecursionError")},
		{name: "deep nesting in C: parser", code: attemptPy + `
attempt("parens", lambda: eval("(" * 10**6))
attempt("unary", lambda: eval("-" * 10**6 + "1"))
attempt("lists", lambda: eval("[" * 1000 + "]" * 1000))
attempt("sum", lambda: compile("+".join(["1"] * 10**5), "s", "eval"))
attempt("dirs", lambda: os.makedirs("/tmp/" + "a/" * 5000))
`, check: wantLines("parens MemoryError ", "unary MemoryError ", "lists MemoryError ", "sum RecursionError ", "dirs RecursionError ")},

		{name: "huge source", code: "x = 0\n" + strings.Repeat("x += 1\n", 20_000) + "print(x)", check: wantLines("20000")},
		{name: "huge source past the memory limit", code: "x = 0\n" + strings.Repeat("x += 1\n", 100_000) + "print(x)",
			slow: true, cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 48 << 20}}, check: func(t *testing.T, res *sandbox.Result, err error) {
				require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
				wantPythonError("MemoryError")(t, res, err)
			}},
		{name: "huge literal", code: "s = '" + strings.Repeat("y", 2<<20) + "'\nprint(len(s))", check: wantLines("2097152")},
		{name: "invalid UTF-8 source", code: "print('\xff\xfe\xc3')", check: wantPythonError("UnicodeEncodeError: 'utf-8' codec can't encode")},
		{name: "binary output", code: "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 2)\nsys.stderr.buffer.write(b'\\xff\\x00\\xc3')",
			check: func(t *testing.T, res *sandbox.Result, err error) {
				require.NoError(t, err)
				all := make([]byte, 256)
				for i := range all {
					all[i] = byte(i)
				}
				assert.Equal(t, append(all, all...), res.Stdout)
				assert.Equal(t, []byte{0xff, 0x00, 0xc3}, res.Stderr)
			}},

		{name: "clock abuse", code: attemptPy + `
import time, select
attempt("negative", lambda: time.sleep(-1))
attempt("nan", lambda: time.sleep(float("nan")))
attempt("huge", lambda: time.sleep(1e300))
attempt("inf", lambda: time.sleep(float("inf")))
attempt("select", lambda: select.select([], [], [], 0.001))
attempt("monotonic", lambda: time.monotonic() > 0)
`, check: wantLines("negative ValueError ", "nan ValueError ", "huge OverflowError ", "inf OverflowError ",
			"select OK ([], [], [])", "monotonic OK True")},
		{name: "sleep past the deadline", code: "import time\ntime.sleep(3600)", cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 300 * time.Millisecond}},
			check: wantStop(context.DeadlineExceeded)},
		{name: "deterministic sleep past the deadline", code: "import time\ntime.sleep(10**9)",
			deterministic: true, cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 300 * time.Millisecond}}, check: wantStop(context.DeadlineExceeded)},

		{name: "a million files", code: `
import errno
try:
    for i in range(10**6):
        open(f"/tmp/f{i}", "w").close()
except OSError as e:
    print(errno.errorcode[e.errno], i)
`, slow: true, cfg: &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 20 * fuel}}, check: wantLines(fmt.Sprintf("ENOSPC %d", sandbox.DefaultRootQuota.MaxFiles-2))},
		{name: "a huge file", code: `
import errno
try:
    f = open("/tmp/big", "wb", buffering=0)
    for mib in range(1024):
        f.write(bytes(1 << 20))
except OSError as e:
    print(errno.errorcode[e.errno], mib)
`, slow: true, check: wantLines(fmt.Sprintf("ENOSPC %d", sandbox.DefaultRootQuota.MaxBytes>>20))},
	}
}

// canary runs a small, known program in its own sandbox on py until stop
// is closed (at least once), and reports every outcome that was not the
// expected one.
func canary(py *sandbox.Guest, stop <-chan struct{}) (runs int, failures []string) {
	for {
		s, err := py.NewSandbox(nil)
		if err != nil {
			return runs, append(failures, err.Error())
		}
		res, err := s.Run(context.Background(), `
open("/work/canary", "w").write(str(sum(range(101))))
print(open("/work/canary").read())`, nil)
		s.Close()
		runs++
		if err != nil {
			failures = append(failures, err.Error())
		} else if string(res.Stdout) != "5050\n" {
			failures = append(failures, fmt.Sprintf("output %q", res.Stdout))
		}
		select {
		case <-stop:
			return runs, failures
		default:
		}
	}
}

// TestHostilePython runs hostile programs on the Python guest. Each must
// end in the expected, specific outcome while a canary sandbox runs on the
// same Guest alongside it, and neither the canary nor the host may notice.
func TestHostilePython(t *testing.T) {
	py := sandboxtest.Python(t)
	outside := t.TempDir()
	secret := "HOST-SECRET-" + filepath.Base(outside)
	secretFile := filepath.Join(outside, "secret.txt")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret), 0o600))
	t.Setenv(hostSecretEnv, secret)

	for _, c := range hostileCases(secretFile) {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.slow {
				t.Skip("slow: several seconds")
			}
			var mounts []sandbox.Mount
			if c.mounts != nil {
				mounts = c.mounts(t)
			}
			s, err := py.NewSandbox(&sandbox.Config{Mounts: mounts, Deterministic: c.deterministic})
			require.NoError(t, err)
			defer s.Close()

			stop := make(chan struct{})
			var runs int
			var failures []string
			var wg sync.WaitGroup
			wg.Go(func() { runs, failures = canary(py, stop) })
			res, err := s.Run(context.Background(), c.code, c.cfg)
			close(stop)
			wg.Wait()

			require.NotNil(t, res, "error: %v", err)
			c.check(t, res, err)
			assert.NotContains(t, string(res.Stdout)+string(res.Stderr), secret)
			assert.Positive(t, runs)
			assert.Empty(t, failures, "the canary beside the hostile run")
			_, failures = canary(py, closed)
			assert.Empty(t, failures, "the canary after the hostile run")
		})
	}
	b, err := os.ReadFile(secretFile)
	require.NoError(t, err)
	assert.Equal(t, secret, string(b), "the host's file is untouched")
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing was created beside it")
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
