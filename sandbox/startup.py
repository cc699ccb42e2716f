# fumehood's start-up code: run before the code of every Python run (one-shot
# runs: see sandbox/run.go; sessions: at the top of the driver, so in the base
# image). It imports nothing but sys: it adds one import hook that fixes the
# modules below as they are imported, so a run that imports none of them
# pays only for compiling this file.
#
#   asyncio                    an event loop without a self-pipe (the guest
#                              has no socketpair), installed as the policy's
#   concurrent.futures.thread  ThreadPoolExecutor running each task in the
#                              calling thread at submit (missing in the guest)
#   threading                  Thread.start says the sandbox has one thread
#   socket                     gethostname/getfqdn are "sandbox"; connecting
#                              raises PermissionError naming the policy
#   urllib.request, http.client  without a network policy: PermissionError
#   pwd, getpass, posixpath    a "sandbox" user whose home is /work, with
#                              os.environ left as the caller set it
#   shutil                     disk_usage from the mount's byte quota (WASI has
#                              no statvfs), told by _fumehood_mounts(text)
#
# _fumehood_hint(e) adds a note to an exception before its traceback is
# printed: for a module not found outside the standard library, one line
# saying what the sandbox has.
def _fumehood_startup():
    import sys

    USER, HOME, HOST = "sandbox", "/work", "sandbox"

    def network():
        # The network policy's sitecustomize leaves its import hook here.
        return any(getattr(f, "__module__", None) == "sitecustomize" for f in sys.meta_path)

    def refuse(what):
        if network():
            return PermissionError(
                "%s: the sandbox has no sockets; HTTP and HTTPS requests go through "
                "urllib.request or http.client, to the hosts the network policy allows" % what)
        return PermissionError(
            "%s: network access is off: the sandbox has no network policy (the host "
            "grants one with SandboxConfig.Network, the command line with --allow-host)" % what)

    def patch_socket(m):
        m.gethostname = lambda: HOST

        def getfqdn(name=""):
            name = name.strip()
            return HOST if not name or name in ("0.0.0.0", "::", HOST) else name

        m.getfqdn = getfqdn

        def getaddrinfo(host, *args, **kwargs):
            raise refuse("getaddrinfo(%r)" % (host,))

        def create_connection(address, *args, **kwargs):
            raise refuse("connecting to %r" % (address,))

        def connect(self, address):
            raise refuse("connecting to %r" % (address,))

        m.getaddrinfo, m.create_connection = getaddrinfo, create_connection
        m.gethostbyname = m.gethostbyname_ex = m.gethostbyaddr = getaddrinfo
        m.socket.connect = m.socket.connect_ex = connect

    def patch_urllib_request(m):
        urlopen = m.urlopen

        def guarded(url, *args, **kwargs):
            if not network():
                target = getattr(url, "full_url", url)
                raise refuse("urlopen(%r)" % (target,))
            return urlopen(url, *args, **kwargs)

        guarded.__doc__, guarded.__wrapped__ = urlopen.__doc__, urlopen
        m.urlopen = guarded

    def patch_http_client(m):
        cls = m.HTTPConnection
        connect = cls.connect

        def guarded(self):
            if not network():
                raise refuse("connecting to %s:%s" % (self.host, self.port))
            return connect(self)

        cls.connect = guarded

    def patch_threading(m):
        def start(self):
            raise RuntimeError(
                "threading.Thread.start: the sandbox runs one thread and cannot start "
                "another; use concurrent.futures.ThreadPoolExecutor (its tasks run in the "
                "calling thread, at submit) or asyncio (asyncio.to_thread runs inline too)")

        m.Thread.start = start

    def patch_getpass(m):
        getuser = m.getuser

        def get():
            try:
                return getuser()
            except (OSError, ImportError, KeyError, AttributeError):
                return USER

        get.__doc__ = getuser.__doc__
        m.getuser = get

    def patch_asyncio(m):
        import time
        import selectors

        class Selector(selectors.PollSelector):
            # With nothing registered, wait by sleeping: no file to poll.
            def select(self, timeout=None):
                if self.get_map():
                    return super().select(timeout)
                if timeout is None:
                    raise RuntimeError(
                        "asyncio: the event loop would wait forever: nothing is scheduled "
                        "and the sandbox has one thread, so nothing can wake it")
                if timeout > 0:
                    time.sleep(timeout)
                return []

        class EventLoop(m.SelectorEventLoop):
            """An event loop for a sandbox: one thread, no sockets, so no
            self-pipe; the default executor runs functions inline."""

            def __init__(self):
                super().__init__(Selector())

            def _make_self_pipe(self):
                self._ssock = self._csock = None

            def _close_self_pipe(self):
                pass

            def _write_to_self(self):
                pass

            def _process_self_data(self, data):
                pass

            async def shutdown_default_executor(self, timeout=None):
                self._executor_shutdown_called = True
                ex, self._default_executor = self._default_executor, None
                if ex is not None:
                    ex.shutdown(wait=True)

        class Policy(m.DefaultEventLoopPolicy):
            _loop_factory = EventLoop

        m.SandboxEventLoop = EventLoop
        m.set_event_loop_policy(Policy())

    mounts = {}  # mount path -> byte quota (0: none), from set_mounts

    def set_mounts(text):
        mounts.clear()
        for item in text.split("\x1e"):
            path, _, quota = item.partition("\x1f")
            if path:
                mounts[path] = int(quota or 0)

    def patch_shutil(m):
        import collections
        usage = collections.namedtuple("usage", "total used free")

        def disk_usage(path):
            """Return disk usage statistics about the given path.

            In the sandbox: total is the byte quota of the mount holding
            path, used the size of the files in it, free what is left."""
            import os, stat
            os.stat(path)  # FileNotFoundError as usual
            p = os.path.abspath(os.fsdecode(path))
            mount = max((d for d in mounts if p == d or p.startswith(d.rstrip("/") + "/")), key=len, default=None)
            if mount is None or not mounts[mount]:
                import errno
                raise OSError(errno.ENOTSUP, "shutil.disk_usage: the mount holding this path has no byte quota", path)
            others = [d for d in mounts if d != mount and (d.startswith(mount.rstrip("/") + "/"))]
            used = 0
            for top, dirs, files in os.walk(mount):
                dirs[:] = [d for d in dirs if os.path.join(top, d) not in others]
                for f in files:
                    try:
                        st = os.lstat(os.path.join(top, f))
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        used += st.st_size
            total = mounts[mount]
            return usage(total, used, max(total - used, 0))

        m.disk_usage = disk_usage
        if "disk_usage" not in m.__all__:
            m.__all__.append("disk_usage")

    patches = {
        "shutil": patch_shutil,
        "socket": patch_socket,
        "urllib.request": patch_urllib_request,
        "http.client": patch_http_client,
        "threading": patch_threading,
        "getpass": patch_getpass,
        "asyncio": patch_asyncio,
    }

    thread_source = '''"""concurrent.futures.thread for the sandbox (fumehood).

The sandbox runs one thread, so ThreadPoolExecutor runs each task in the
calling thread when it is submitted: submit returns a future that is already
done, in submission order. map, as_completed, wait and asyncio's executors
work as usual; a task that blocks waiting for another task never returns.
"""
import itertools
from concurrent.futures import _base

__all__ = ["ThreadPoolExecutor", "BrokenThreadPool"]


class BrokenThreadPool(_base.BrokenExecutor):
    """Raised when the executor's initializer failed."""


class ThreadPoolExecutor(_base.Executor):
    """An executor that runs each task in the calling thread, at submit."""

    _counter = itertools.count().__next__

    def __init__(self, max_workers=None, thread_name_prefix="", initializer=None, initargs=()):
        if max_workers is None:
            max_workers = 5
        if max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._max_workers = max_workers
        self._thread_name_prefix = thread_name_prefix or ("ThreadPoolExecutor-%d" % self._counter())
        self._initializer, self._initargs = initializer, initargs
        self._initialized = initializer is None
        self._broken = False
        self._shutdown = False

    def submit(self, fn, /, *args, **kwargs):
        if self._broken:
            raise BrokenThreadPool(self._broken)
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if not self._initialized:
            try:
                self._initializer(*self._initargs)
            except BaseException as e:
                self._broken = "A thread initializer failed, the thread pool is not usable anymore"
                raise BrokenThreadPool(self._broken) from e
            self._initialized = True
        f = _base.Future()
        if not f.set_running_or_notify_cancel():
            return f
        try:
            result = fn(*args, **kwargs)
        except Exception as e:
            f.set_exception(e)
        else:
            f.set_result(result)
        return f

    submit.__doc__ = _base.Executor.submit.__doc__

    def shutdown(self, wait=True, *, cancel_futures=False):
        self._shutdown = True

    shutdown.__doc__ = _base.Executor.shutdown.__doc__
'''

    pwd_source = '''"""pwd for the sandbox (fumehood): one user, "sandbox", uid 0, home /work."""

__all__ = ["getpwuid", "getpwnam", "getpwall", "struct_passwd"]


class struct_passwd(tuple):
    """pwd.struct_passwd: (pw_name, pw_passwd, pw_uid, pw_gid, pw_gecos, pw_dir, pw_shell)."""

    n_fields = n_sequence_fields = 7
    pw_name = property(lambda self: self[0])
    pw_passwd = property(lambda self: self[1])
    pw_uid = property(lambda self: self[2])
    pw_gid = property(lambda self: self[3])
    pw_gecos = property(lambda self: self[4])
    pw_dir = property(lambda self: self[5])
    pw_shell = property(lambda self: self[6])

    def __repr__(self):
        names = ("pw_name", "pw_passwd", "pw_uid", "pw_gid", "pw_gecos", "pw_dir", "pw_shell")
        return "pwd.struct_passwd(%s)" % ", ".join("%s=%r" % kv for kv in zip(names, self))


_entry = struct_passwd(("@USER@", "x", 0, 0, "sandbox user", "@HOME@", "/bin/sh"))


def getpwuid(uid):
    """The sandbox user for uid 0; KeyError otherwise."""
    if uid != 0:
        raise KeyError("getpwuid(): uid not found: %r" % (uid,))
    return _entry


def getpwnam(name):
    """The sandbox user for its name; KeyError otherwise."""
    if name != _entry.pw_name:
        raise KeyError("getpwnam(): name not found: %r" % (name,))
    return _entry


def getpwall():
    """A list of the one user."""
    return [_entry]
'''.replace("@USER@", USER).replace("@HOME@", HOME)

    sources = {"concurrent.futures.thread": thread_source, "pwd": pwd_source}

    class Patching:
        def __init__(self, loader, fix):
            self._loader, self._fix = loader, fix

        def __getattr__(self, name):
            return getattr(self._loader, name)

        def create_module(self, spec):
            return self._loader.create_module(spec)

        def exec_module(self, module):
            self._loader.exec_module(module)
            self._fix(module)

    class Source:
        def __init__(self, name):
            self.name = name

        def create_module(self, spec):
            return None

        def get_source(self, name):
            return sources[name]

        def exec_module(self, module):
            name = module.__name__
            exec(compile(sources[name], "<fumehood %s>" % name, "exec"), module.__dict__)

    busy = set()

    class Finder:
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name in sources:
                from importlib.machinery import ModuleSpec
                return ModuleSpec(name, Source(name), origin="fumehood")
            fix = patches.get(name)
            if fix is None or name in busy:
                return None
            # The finders after this one (another hook that does the same,
            # such as the network's sitecustomize, may call this one back:
            # busy answers it).
            busy.add(name)
            try:
                after = sys.meta_path[sys.meta_path.index(cls) + 1:] if cls in sys.meta_path else []
                for finder in after:
                    if not hasattr(finder, "find_spec"):
                        continue
                    spec = finder.find_spec(name, path, target)
                    if spec is not None:
                        spec.loader = Patching(spec.loader, fix)
                        return spec
            finally:
                busy.discard(name)
            return None

    sys.meta_path.insert(0, Finder)

    # ~ is /work when HOME is not set (os.environ stays as the caller set it).
    import posixpath

    expanduser = posixpath.expanduser

    def expand(path):
        import os
        p = os.fspath(path)
        tilde, sep = ("~", "/") if isinstance(p, str) else (b"~", b"/")
        if not p.startswith(tilde) or "HOME" in os.environ:
            return expanduser(path)
        i = p.find(sep, 1)
        if i < 0:
            i = len(p)
        if p[1:i] not in (p[:0], USER if isinstance(p, str) else USER.encode()):
            return expanduser(path)
        home = HOME if isinstance(p, str) else HOME.encode()
        return home + p[i:]

    expand.__doc__ = expanduser.__doc__
    posixpath.expanduser = expand
    return set_mounts


_fumehood_mounts = _fumehood_startup()
del _fumehood_startup


def _fumehood_hint(e):
    import sys
    if isinstance(e, ModuleNotFoundError) and isinstance(e.name, str):
        if e.name.partition(".")[0] not in sys.stdlib_module_names:
            e.add_note("The sandbox has Python's standard library only (no pip, no packages); "
                       "pure-Python modules can be added as files (a mount or copied files) "
                       "on sys.path or PYTHONPATH.")
