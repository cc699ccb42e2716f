# The one-shot runner's outcome writer (runner.py), compiled only when a
# run's code raised an exception: compiling it with the runner would cost
# every run millions of instructions. It reports the exception as the
# session driver (driver.py) does, in the same files (see outcome.go): the
# exception's type, message and traceback, each cut to n bytes, at
# result.type, result.message and result.traceback in the control
# directory, then the JSON outcome at result. It is a copy of the driver's
# writer, not shared with it: the driver's bytes key the base images and
# snapshots of sessions.
#
# The runner runs it with globals e (the exception), tb (its traceback,
# without the runner's frame), result and n.
import os, traceback


def put(name, data):
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def report():
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
    for k, v in out.items():
        put(result + "." + k, v[:n].encode("utf-8", "backslashreplace")[:n])
    put(result, b'{"value": false, "exception": true, "exit": null}')


report()
