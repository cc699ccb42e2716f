# fumehood's one-shot runner, run after startup.py as `python -u -B -c
# BOOTSTRAP STARTUP+RUNNER CODE NAME MOUNTS RESULT MAX WRITER ARGS...` (see
# oneShotArgs in run.go): it runs CODE in __main__ as the file
# NAME (sys.argv[0] is NAME, or "-c" when NAME is "<string>"), registers
# its lines with linecache when an exception is printed, so the traceback
# shows them, and leaves out its own frame; it prints the traceback, then
# WRITER (outcome_writer.py) reports the exception at RESULT.
def _fumehood_run():
    import sys
    me = sys._getframe().f_code
    g = globals()
    hint = g.pop("_fumehood_hint")
    del g["_fumehood_tag"]
    g.pop("_fumehood_mounts")(sys.argv[4])
    del g["_fumehood_run"]
    code, name, result, n, report = sys.argv[2], sys.argv[3], sys.argv[5], int(sys.argv[6]) + 1, sys.argv[7]
    del sys.argv[1:8]
    sys.argv[0] = "-c" if name == "<string>" else name
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
        if sys.excepthook is sys.__excepthook__:
            import traceback
            traceback.print_exception(type(e), e, tb)
        else:
            sys.excepthook(type(e), e, tb)
        try:
            exec(report, {"e": e, "tb": tb, "result": result, "n": n})
        except BaseException:
            pass
        raise SystemExit(1)


_fumehood_tag(_fumehood_run)
_fumehood_run()
