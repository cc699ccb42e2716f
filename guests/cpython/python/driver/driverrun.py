# How fumehood's drivers run a request: the part the built guest's driver
# (fhdriver.py, the Python side of cdriver/fhdriver.c) and the npm guest's
# session driver (sandbox/driver.py) share. Each is this file followed by
# its own; both run in one module's namespace, the interpreter's first
# __main__ (G below), whose frames a traceback leaves out.
#
# _fumehood_settle ends every request, whatever became of it.
#
# _fumehood_runner returns run(req), which applies a request (the
# session driver's JSON request, as a dict: code, n, env, seed, path,
# site, mounts, and a one-shot run's name and argv) and runs its code;
# execute(code, name), which runs code alone; and runs, the names of the
# runs whose source linecache holds (the last 64). Both return the outcome
# as a dict: 'value' (the last expression's repr, when not None), 'exit'
# (a SystemExit's status, 0 to 255 as python's exit makes it), or 'type',
# 'message' and 'traceback' (the exception's).
#
# split(code, name) compiles code as compile(code, name, 'exec') would,
# split at a last statement that is an expression: (body, last), last
# compiled in 'eval' mode or None. mounts, if not None, is given a
# request's mounts; hint, if not None, each exception the code raises.
#
# Nothing here is trusted by the host: the guest's code can reach all of it.
import builtins, linecache, os, sys, traceback

def _fumehood_runner(G, ns, split, mounts, hint):
    runs = []

    def trimmed(e):
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_globals is G:
            tb = tb.tb_next
        if isinstance(e, SyntaxError):
            return None
        # As CPython's own printer: the last sys.tracebacklimit frames
        # (1000), which also keeps a RecursionError's traceback quick.
        limit = getattr(sys, 'tracebacklimit', 1000)
        limit = max(limit, 0) if isinstance(limit, int) else 1000
        depth, t = 0, tb
        while t is not None:
            depth, t = depth + 1, t.tb_next
        for _ in range(depth - limit):
            tb = tb.tb_next
        return tb

    def run(req):
        out = {}
        env = req.get('env')
        if env is not None:
            # The session's environment replaces the one the interpreter
            # started with (the base image's PYTHONHASHSEED=0): in
            # os.environ, in the C library's (os.environ.clear unsets) and
            # in posix.environ. Rewritten only where it differs: the built
            # guest's image has an empty one, as most sessions do, and
            # rewriting it writes pages a session would keep as its own.
            penv = sys.modules['posix'].environ
            if len(env) != len(os.environ) or len(penv) != len(env) or any(os.environ.get(k) != v for k, v in env.items()):
                os.environ.clear()
                os.environ.update(env)
                penv.clear()
                penv.update((os.fsencode(k), os.fsencode(v)) for k, v in env.items())
            # PYTHONPATH as the interpreter reads it at start-up: after the
            # script's directory, before the standard library.
            at = 1 if sys.path[:1] == [''] else 0
            sys.path[at:at] = [p for p in env.get('PYTHONPATH', '').split(':') if p and p not in sys.path]
        if 'mounts' in req and mounts is not None:
            mounts(req['mounts'])
        sys.path[0:0] = req.get('path', [])
        for d in req.get('site', []):
            sys.path.insert(0, d)
            try:
                import sitecustomize
            finally:
                sys.path.remove(d)
                sys.modules.pop('sitecustomize', None)
        seed = req.get('seed')
        if seed is not None:
            # A new session, a fork or a resume: renew the random state
            # CPython renews in a child after os.fork(), the random
            # module's and tempfile's names (whose generator a changed
            # pid would renew: the pid is always the same here).
            if 'random' in sys.modules:
                sys.modules['random'].seed(bytes.fromhex(seed))
            if 'tempfile' in sys.modules:
                sys.modules['tempfile']._name_sequence = None
        code = req.get('code')
        if code is None:
            return out
        name = req.get('name') or '<run-%d>' % req.get('n', 0)
        argv = req.get('argv')
        if argv is not None:
            sys.argv[:] = [str(a) for a in argv]
        return execute(code, name)

    def execute(code, name):
        out = {}
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        runs.append(name)
        if len(runs) > 64:
            linecache.cache.pop(runs.pop(0), None)
        try:
            body, last = split(code, name)
            exec(body, ns)
            if last is not None:
                value = eval(last, ns)
                if value is not None:
                    builtins._ = value
                    out['value'] = repr(value)
        except SystemExit as e:
            code = e.code
            if code is None:
                code = 0
            elif isinstance(code, int):
                # The status a POSIX parent sees of python exiting with
                # it: C's int of the code's long long (-1 past it), whose
                # low 8 bits are the status.
                code = int.__int__(code)
                code = code & 0xff if -2**63 <= code < 2**63 else 255
            else:
                print(code, file=sys.stderr)
                code = 1
            out['exit'] = code
        except BaseException as e:
            if hint is not None:
                try:
                    hint(e)
                except BaseException:
                    pass
            tb = trimmed(e)
            text = ''.join(traceback.format_exception(type(e), e, tb))
            try:
                if sys.excepthook is sys.__excepthook__:
                    sys.stderr.write(text)
                else:
                    sys.excepthook(type(e), e, tb)
            except BaseException:
                pass
            try:
                message = str(e)
            except BaseException:
                message = '<unprintable %s>' % type(e).__name__
            out['type'] = type(e).__module__ + '.' + type(e).__qualname__ if type(e).__module__ not in ('builtins', '__main__') else type(e).__qualname__
            out['message'] = message
            out['traceback'] = text
        return out

    return run, execute, runs


def _fumehood_settle():
    # What the code wrote is flushed, and the host-call channel closed:
    # it does not stay open between requests (the npm guest's sessions are
    # paused there, and it must not be open across the pause).
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    fh = sys.modules.get('fumehood')
    if fh is not None and getattr(fh, '_fd', None) is not None:
        try:
            os.close(fh._fd)
        except OSError:
            pass
        fh._fd = None
