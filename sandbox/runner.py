# fumehood's one-shot runner, run after startup.py as `python -u -B -c
# BOOTSTRAP STARTUP+RUNNER CODE NAME MOUNTS RESULT MAX ARGS...` (see
# oneShotArgs in run.go): it runs CODE in __main__ as the file
# NAME (sys.argv[0] is NAME, or "-c" when NAME is "<string>"), registers
# its lines with linecache when an exception is printed, so the traceback
# shows them, and leaves out its own frame.
#
# An exception is printed on stderr, as python prints it, and reported to
# the host as the session driver (driver.py) reports it, in the same files
# (see outcome.go): its type, message and traceback, each cut to MAX+1
# bytes, at RESULT.type, RESULT.message and RESULT.traceback in the control
# directory, then the JSON outcome at RESULT. This is a copy of the
# driver's writer, not shared with it: the driver's bytes key the base
# images and snapshots of sessions.
def _fumehood_run():
    import sys
    me = sys._getframe().f_code
    g = globals()
    hint = g.pop("_fumehood_hint")
    del g["_fumehood_tag"]
    g.pop("_fumehood_mounts")(sys.argv[4])
    del g["_fumehood_run"]
    code, name, result, n = sys.argv[2], sys.argv[3], sys.argv[5], int(sys.argv[6]) + 1
    del sys.argv[1:7]
    sys.argv[0] = "-c" if name == "<string>" else name

    def report(e, tb):
        import os, traceback
        t = type(e)
        try:
            message = str(e)
        except BaseException:
            message = "<unprintable %s>" % t.__name__
        out = {
            "type": t.__qualname__ if t.__module__ in ("builtins", "__main__") else t.__module__ + "." + t.__qualname__,
            "message": message,
            "traceback": "".join(traceback.format_exception(t, e, tb)),
        }

        def put(name, data):
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)

        for k, v in out.items():
            put(result + "." + k, v[:n].encode("utf-8", "backslashreplace")[:n])
        put(result, b'{"value": false, "exception": true, "exit": null}')

    try:
        # exec of a string names it "<string>"; another name needs the
        # compile builtin, which costs the first use about 50 million
        # instructions (a few tens of milliseconds).
        exec(code if name == "<string>" else compile(code, name, "exec"), g)
    except SystemExit:
        raise
    except BaseException as e:
        import linecache
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        tb = e.__traceback__
        if tb is not None and tb.tb_frame.f_code is me:
            tb = tb.tb_next
        # As CPython's own printer: the last 1000 frames (sys.tracebacklimit),
        # which also keeps a RecursionError's traceback quick to print.
        limit = getattr(sys, "tracebacklimit", 1000)
        limit = limit if isinstance(limit, int) else 1000
        depth, t = 0, tb
        while t is not None:
            depth, t = depth + 1, t.tb_next
        for _ in range(depth - max(limit, 0)):
            tb = tb.tb_next
        hint(e)
        import traceback
        if sys.excepthook is sys.__excepthook__:
            traceback.print_exception(type(e), e, tb)
        else:
            sys.excepthook(type(e), e, tb)
        try:
            report(e, tb)
        except BaseException:
            pass
        raise SystemExit(1)


_fumehood_tag(_fumehood_run)
_fumehood_run()
