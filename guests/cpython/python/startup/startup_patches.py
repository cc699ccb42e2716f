# fumehood's fixes of standard modules, compiled by startup.py the first time
# one of them is imported (so runs that import none of them do not pay for
# compiling this). startup.py runs it in a namespace holding sys, USER,
# HOME, HOST, mounts and run; each patch_NAME(module) fixes the module NAME
# (dots as underscores) after it executed (startup.py's Patching is its
# loader); expand is os.path.expanduser.

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
        "grants one with sandbox.Config.Network, the command line with --allow-host)" % what)

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


def patch_matplotlib_pyplot(m):
    # The guest has no display: with a non-interactive backend (Agg, the
    # data variant's), plt.show() saves each open figure as a PNG under
    # /work, where a result lists and attaches it, prints where, and
    # closes the figures, as a window closed by its user would be.
    show = m.show
    shown = [0]

    def fumehood_show(*args, **kwargs):
        nums = m.get_fignums()
        if not nums or m.get_backend().lower() != "agg":
            return show(*args, **kwargs)
        import os
        os.makedirs(HOME, exist_ok=True)
        for num in nums:
            shown[0] += 1
            path = "%s/figure-%d.png" % (HOME, shown[0])
            m.figure(num).savefig(path)
            print("plt.show(): figure saved to " + path)
        m.close("all")

    fumehood_show.__doc__ = show.__doc__
    m.show = fumehood_show


def expand(expanduser, path):
    # ~ and ~sandbox are /work when HOME is not set (os.environ stays as the
    # caller set it).
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

def patch_locale(m):
    # WASI's C library has the C locale only, with UTF-8, but its setlocale
    # accepts any name and returns it, changing nothing: setlocale(LC_ALL,
    # "de_DE.UTF-8") would seem to work and leave "." as the decimal point.
    # Refuse what is not there, as a system without that locale does.
    setlocale = m.setlocale
    there = ("C", "POSIX", "C.UTF-8", "C.utf8")

    def c_only(category, locale=None):
        if locale is None:
            return setlocale(category)
        if locale == "":
            before = setlocale(category)
            got = setlocale(category, "")
            if all(part in there for part in got.split(";")):
                return got
            setlocale(category, before)
            name = got
        else:
            name = locale if isinstance(locale, str) else m._build_localename(locale)
            if name in there:
                return setlocale(category, name)
        raise m.Error("unsupported locale setting: %r (the sandbox has the C locale only: "
                      "C, POSIX and C.UTF-8)" % (name,))

    c_only.__doc__, c_only.__wrapped__ = setlocale.__doc__, setlocale
    m.setlocale = c_only
