# The session driver: the program a session's interpreter runs. It is
# fumehood's own code, run as `python -u -B -c DRIVER`.
#
# It reads requests from fd 0, each "<length>\n<JSON>", runs each request's
# code in one persistent __main__ namespace, and writes the outcome to the
# control directory: each text (the value's repr, the exception's type,
# message and traceback) to a file of its own, then the JSON outcome, to the
# request's result path, saying which texts there are. The host reads each
# file with a bound and caps each text itself: the driver cuts texts to
# max_value+1 bytes only to save copying (the code can change max_value).
# Between requests it blocks in os.read(0), which is where the host pauses
# the interpreter (asyncify unwinds from fd_read), so everything below must
# leave no file open across that read.
import ast, builtins, json, linecache, os, sys, traceback, types

def _driver():
    G = globals()
    main = types.ModuleType('__main__')
    main.__builtins__ = builtins
    sys.modules['__main__'] = main
    ns = main.__dict__
    read, write, loads, dumps = os.read, os.write, json.loads, json.dumps
    buf = bytearray()
    runs = []

    def need(n):
        while len(buf) < n:
            chunk = read(0, 1 << 20)
            if not chunk:
                raise SystemExit(0)
            buf.extend(chunk)

    def request():
        while b'\n' not in buf:
            need(len(buf) + 1)
        head, _, rest = bytes(buf).partition(b'\n')
        buf[:] = rest
        n = int(head)
        need(n)
        body = bytes(buf[:n])
        del buf[:n]
        return loads(body)

    def trimmed(e):
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_globals is G:
            tb = tb.tb_next
        if isinstance(e, SyntaxError):
            tb = None
        return tb

    def run(req):
        out = {}
        env = req.get('env')
        if env is not None:
            # The session's environment replaces the one the base image
            # was built with (PYTHONHASHSEED=0): in os.environ, in the C
            # library's (os.environ.clear unsets) and in posix.environ.
            os.environ.clear()
            os.environ.update(env)
            penv = sys.modules['posix'].environ
            penv.clear()
            penv.update((os.fsencode(k), os.fsencode(v)) for k, v in env.items())
            # PYTHONPATH as the interpreter reads it at start-up: after the
            # script's directory, before the standard library.
            at = 1 if sys.path[:1] == [''] else 0
            sys.path[at:at] = [p for p in env.get('PYTHONPATH', '').split(':') if p and p not in sys.path]
        if 'mounts' in req:
            _fumehood_mounts(req['mounts'])
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
        name = '<run-%d>' % req.get('n', 0)
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        runs.append(name)
        if len(runs) > 64:
            linecache.cache.pop(runs.pop(0), None)
        try:
            tree = ast.parse(code, name, 'exec')
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, name, 'exec'), ns)
            if last is not None:
                value = eval(compile(last, name, 'eval'), ns)
                if value is not None:
                    builtins._ = value
                    out['value'] = repr(value)
        except SystemExit as e:
            code = e.code
            if code is None:
                code = 0
            elif not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
            out['exit'] = int(code)
        except BaseException as e:
            try:
                _fumehood_hint(e)
            except BaseException:
                pass
            text = ''.join(traceback.format_exception(type(e), e, trimmed(e)))
            try:
                sys.stderr.write(text)
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

    def put(name, data):
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            while data:
                data = data[write(fd, data):]
        finally:
            os.close(fd)

    while True:
        req = request()
        try:
            out = run(req)
        except BaseException as e:
            out = {'type': type(e).__name__, 'message': 'session driver: ' + str(e), 'traceback': ''}
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except BaseException:
                pass
        # The host-call channel must not stay open across the pause.
        fh = sys.modules.get('fumehood')
        if fh is not None and getattr(fh, '_fd', None) is not None:
            try:
                os.close(fh._fd)
            except OSError:
                pass
            fh._fd = None
        result = req['result']
        # The host cuts each text to max_value bytes; one byte more tells
        # it that the text was longer.
        n = req.get('max_value')
        n = n + 1 if type(n) is int and n >= 0 else None
        meta = {'value': 'value' in out, 'exception': 'type' in out, 'exit': out.get('exit')}
        for k in ('value', 'type', 'message', 'traceback'):
            if k in out:
                put(result + '.' + k, out.pop(k)[:n].encode('utf-8', 'backslashreplace')[:n])
        put(result, dumps(meta).encode())

_driver()
