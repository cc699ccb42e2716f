# fumehood's start-up code: run before the code of every Python run, one-shot
# or in a session (once per pre-initialized image, before the driver's Python
# side). It imports nothing but sys: it adds one import hook that fixes the
# modules below as they are imported, with the code of startup_patches.py,
# compiled then: a run that imports none of them pays only for compiling
# this file. The host puts the sources of startup_patches.py and the
# modules' (startup_thread.py, startup_pwd.py, ...) before it, as the dict
# _fumehood_lazy.
#
#   asyncio                    an event loop without a self-pipe (the guest
#                              has no socketpair), installed as the policy's
#   concurrent.futures.thread  ThreadPoolExecutor running each task in the
#                              calling thread at submit (missing in the guest;
#                              startup_thread.py)
#   threading                  Thread.start runs the target to its end; a
#                              wait no other thread could end raises
#   concurrent.futures.process ProcessPoolExecutor as ThreadPoolExecutor
#                              (startup_process.py)
#   multiprocessing.context    Process.start runs the target inline
#   multiprocessing.pool, .queues, .synchronize, .sharedctypes  Pool,
#                              Queue, Lock, Value, Pipe... inline
#                              (startup_multiprocessing.py)
#   signal                     alarm, setitimer(ITIMER_REAL), getitimer,
#                              pause: SIGALRM through the host (with the
#                              built guest's _fumehood_timer)
#   mmap                       a copy of the file, written back on flush
#                              and close (startup_mmap.py)
#   socket                     gethostname/getfqdn are "sandbox"; connecting
#                              raises PermissionError naming the policy
#   urllib.request, http.client  without a network policy: PermissionError
#   pwd, getpass, posixpath    a "sandbox" user whose home is /work (pwd:
#                              startup_pwd.py), with
#                              os.environ left as the caller set it
#   shutil                     disk_usage from the mount's byte quota (WASI has
#                              no statvfs), told by _fumehood_mounts(text)
#   matplotlib.pyplot          show() on Agg saves the open figures to
#                              /work/figure-N.png and closes them (the data
#                              variant; the guest has no display)
#
# _fumehood_tag(f, ...) names the code of functions "<fumehood>" (the runner
# uses it too); _fumehood_hint(e) adds a note to an exception before its traceback is
# printed: for a module not found outside the standard library, one line
# saying what the sandbox has.
def _fumehood_startup():
    import sys

    USER, HOME, HOST = "sandbox", "/work", "sandbox"

    mounts = {}  # mount path -> byte quota (0: none), from set_mounts

    def set_mounts(text):
        mounts.clear()
        for item in text.split("\x1e"):
            path, _, quota = item.partition("\x1f")
            if path:
                mounts[path] = int(quota or 0)

    lazy = globals().pop("_fumehood_lazy")
    timer = globals().pop("_fumehood_timer", None)  # the built guest's driver's

    def text(key):
        return lazy[key]
    tag = globals()["_fumehood_tag"]
    fixes = {}  # the namespace of startup_patches.py, once compiled

    def run(source, namespace):
        # exec of a string, not the compile builtin (see _fumehood_tag).
        exec(source, namespace)
        tag(*[v for v in list(namespace.values()) if getattr(v, "__module__", None) == namespace["__name__"]])

    def load():
        if not fixes:
            fixes.update(__name__="fumehood_patches", sys=sys, USER=USER, HOME=HOME, HOST=HOST,
                         mounts=mounts, run=run)
            run(text("patches"), fixes)
        return fixes

    def fix(name):
        def apply(module):
            if "fix " + name in own:
                # A fix of its own, compiled alone (startup_fix_*.py).
                namespace = {"__name__": "fumehood_fix", "sys": sys, "run": run, "TIMER": timer}
                run(text("fix " + name), namespace)
                namespace["patch"](module)
            else:
                load()["patch_" + name.replace(".", "_")](module)
        return apply

    own = {"fix threading", "fix signal", "fix multiprocessing.context"}

    patches = {name: fix(name) for name in
               ("shutil", "socket", "urllib.request", "http.client", "threading", "getpass", "asyncio",
                "locale", "signal", "multiprocessing.context", "matplotlib.pyplot")}
    sources = {name: name for name in ("concurrent.futures.thread", "concurrent.futures.process", "pwd", "mmap")}
    for name in ("pool", "queues", "synchronize", "sharedctypes"):
        sources["multiprocessing." + name] = "multiprocessing"

    class Patching:
        # The loader of a module to fix: its own, then the fix.
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
        # The loader of a module of sources.
        def create_module(self, spec):
            return None

        def get_source(self, name):
            return text(sources[name])

        def exec_module(self, module):
            run(text(sources[module.__name__]), module.__dict__)

    busy = set()

    class Finder:
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name in sources:
                from importlib.machinery import ModuleSpec
                return ModuleSpec(name, Source(), origin="fumehood")
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
        return load()["expand"](expanduser, path)

    expand.__doc__ = expanduser.__doc__
    posixpath.expanduser = expand
    return set_mounts


def _fumehood_hint(e):
    import sys
    if isinstance(e, ModuleNotFoundError) and isinstance(e.name, str):
        if e.name.partition(".")[0] not in sys.stdlib_module_names:
            e.add_note("The sandbox has Python's standard library only (no pip, no packages); "
                       "pure-Python modules can be added as files (a mount or copied files) "
                       "on sys.path or PYTHONPATH.")


def _fumehood_tag(*objects):
    # fumehood's code is run with exec of a string, named "<string>" like
    # the user's code (the compile builtin would cost the first run some 50
    # million instructions, setting up the ast module's types): renaming
    # the code of its functions, and of its classes' methods, "<fumehood>"
    # keeps their frames apart in tracebacks and linecache.
    def tag(c):
        return c.replace(co_filename="<fumehood>",
                         co_consts=tuple(tag(k) if type(k) is type(c) else k for k in c.co_consts))
    function = type(tag)
    for o in objects:
        for f in vars(o).values() if isinstance(o, type) else (o,):
            f = getattr(f, "__func__", f)
            if type(f) is function:
                f.__code__ = tag(f.__code__)


_fumehood_tag(_fumehood_startup, _fumehood_hint, _fumehood_tag)
_fumehood_mounts = _fumehood_startup()
del _fumehood_startup
