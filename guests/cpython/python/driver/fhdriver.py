# The Python side of fumehood's driver in the built guest
# (cdriver/fhdriver.c), after driverrun.py (how a request runs, which the
# npm guest's session driver shares). fumehood_init runs the two once in
# __main__'s namespace after the interpreter started, possibly preceded by
# other start-up code; they define fumehood_exec, which the C side calls
# for every request with the request's bytes and whose returned bytes are
# the outcome.
#
# A request is the session driver's JSON request (sandbox/driver.py):
# code, n, env, seed, path, site, mounts, max_value; "result" is not
# needed, the outcome is returned. A request of code alone (most runs of a
# session) comes compact instead, without JSON: "<n> <max_value>\n"
# and the code, UTF-8. A one-shot run from an image adds name
# (the code's file name in tracebacks, default <run-N>), argv (sys.argv)
# and final (run atexit's functions after the code, as an exiting
# interpreter does). The code runs in one persistent
# __main__ namespace; the last statement, if an expression, is evaluated
# apart for its repr (and builtins._).
#
# The outcome holds what the session driver writes to its files, in this
# order, each as a little-endian u32 length and that many bytes:
#
#   the JSON outcome ({"value": bool, "exception": bool, "exit": int|null},
#   sandbox/outcome.go's)
#   the value's repr, the exception's type, message and traceback (UTF-8;
#   empty when absent), each cut to max_value+1 bytes
#
# Nothing here is trusted by the host: the guest's code can reach all of it.
import builtins, json, linecache, sys, types

def _fumehood_driver():
    G = globals()
    main = types.ModuleType('__main__')
    main.__builtins__ = builtins
    sys.modules['__main__'] = main
    ns = main.__dict__
    if sys.path[:1] != ['']:
        sys.path.insert(0, '')  # as `python -c` has it
    # The C scanner json.loads ends in, without its wrappers: the host's
    # request is one JSON object, UTF-8.
    scan = json.decoder.JSONDecoder().scan_once
    mounts = G.get('_fumehood_mounts')
    # The C side's compile, split at a last statement that is an
    # expression (cdriver/fhdriver.c's fh_compile, which fumehood_init
    # puts here before this runs).
    split = G['_fumehood_compile']
    hint = G.get('_fumehood_hint')

    run, execute, runs = _fumehood_runner(G, ns, split, mounts, hint)

    def final():
        # What an exiting interpreter runs: atexit's functions.
        try:
            import atexit
            atexit._run_exitfuncs()
        except BaseException:
            pass

    def pack(out, n):
        if not out:
            return nothing
        exit = out.get('exit')
        parts = [b'{"value": %s, "exception": %s, "exit": %s}' % (
            b'true' if 'value' in out else b'false',
            b'true' if 'type' in out else b'false',
            b'null' if exit is None else b'%d' % exit)]
        for k in ('value', 'type', 'message', 'traceback'):
            parts.append(out[k][:n].encode('utf-8', 'backslashreplace')[:n] if k in out else b'')
        return b''.join([b for p in parts for b in (len(p).to_bytes(4, 'little'), p)])

    nothing = pack({'exit': None}, 0)  # what a run with no outcome returns

    def fumehood_exec(data):
        n = None
        try:
            if data[:1] != b'{':
                # Most runs': code alone, "<n> <max_value>\n<code>".
                head, _, code = data.partition(b'\n')
                num, n = head.split(b' ')
                n = int(n)
                n = n + 1 if n >= 0 else None
                out = execute(code.decode(), '<run-%d>' % int(num))
            else:
                req = scan(data.decode(), 0)[0]
                # The cut is read before the code runs, which can reach req.
                n = req.get('max_value') if type(req) is dict else None
                n = n + 1 if type(n) is int and n >= 0 else None
                out = run(req)
                if req.get('final'):
                    final()
        except BaseException as e:
            req = {}
            out = {'type': type(e).__name__, 'message': 'fumehood driver: ' + str(e), 'traceback': ''}
        _fumehood_settle()
        try:
            return pack(out, n)
        except MemoryError:
            # The texts did not fit in what memory is left: what does.
            return pack(out, min(n or 4096, 4096))

    # Pay for first uses now, so that they are in the initialized image:
    # the ast types compile() sets up, traceback's formatting.
    # The traceback written to stderr goes nowhere.
    err, sys.stderr = sys.stderr, types.SimpleNamespace(write=len, flush=lambda: None)
    try:
        # Both forms of request, so that what their first use writes (the
        # interpreter's specialized instructions, caches) is in the image,
        # not in every session's own pages.
        for warm in (b'None', b'1/0'):
            fumehood_exec(b'{"code": "%s", "n": -1}' % warm)
            fumehood_exec(b'-1 -1\n' + warm)
    finally:
        sys.stderr = err
    linecache.cache.pop('<run--1>', None)
    runs.clear()
    # The environment the image started with (PYTHONHASHSEED=0, read at
    # start-up) is no session's: each request that sends one replaces it.
    run({'env': {}})
    return fumehood_exec

fumehood_exec = _fumehood_driver()
del _fumehood_driver
