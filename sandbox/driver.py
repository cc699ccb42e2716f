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
# leave no file open across that read. How a request runs is the built
# guest driver's (internal/guests/cpython/driverrun.py, which precedes
# this in the one source).
import ast, builtins, json, os, sys, types

def _driver():
    G = globals()
    main = types.ModuleType('__main__')
    main.__builtins__ = builtins
    sys.modules['__main__'] = main
    ns = main.__dict__
    read, write, loads, dumps = os.read, os.write, json.loads, json.dumps
    buf = bytearray()

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

    def split(code, name):
        # The npm guest has no _fumehood_compile: the ast module's objects.
        tree = ast.parse(code, name, 'exec')
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = compile(ast.Expression(tree.body.pop().value), name, 'eval')
        return compile(tree, name, 'exec'), last

    run, _, _ = _fumehood_runner(G, ns, split, G.get('_fumehood_mounts'), G.get('_fumehood_hint'))

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
        _fumehood_settle()
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
