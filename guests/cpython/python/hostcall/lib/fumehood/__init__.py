"""Call the host's functions from sandboxed code.

    import fumehood
    hits = fumehood.call("search", query="wasm", limit=3)

A call sends the keyword arguments (as JSON) to the function the host
registered under that name and returns its result, decoded from JSON. A
failure raises CallError, whose kind says what went wrong. HTTP requests
through the host's network policy are in fumehood.http.
"""

import json as _json
import os as _os

__all__ = ["call", "Error", "CallError"]

# The channel file sits beside lib/, which holds this package.
_CHANNEL = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.dirname(__file__))), "call")
_fd = None


class Error(Exception):
    """The base of fumehood's errors."""


class CallError(Error):
    """A host function failed.

    kind is "error" (the function returned an error), "unknown" (no such
    function), "arguments" (arguments it cannot take), "panic" (it crashed),
    "limit" (too many calls, or too large), "canceled" (the run is ending)
    or "protocol".
    """

    def __init__(self, message, function=None, kind="error"):
        super().__init__(message)
        self.message = message
        self.function = function
        self.kind = kind


def _roundtrip(header, body=b""):
    """Send one request frame, return the response's header and body.

    The channel takes one request at a time: it refuses the next (EAGAIN)
    until the response is read to its end. If anything interrupts the
    exchange (a MemoryError, say), the channel is closed, so the next call
    starts on a fresh one.
    """
    global _fd
    h = _json.dumps(header, separators=(",", ":")).encode()
    frame = len(h).to_bytes(4, "big") + len(body).to_bytes(4, "big") + h + body
    if _fd is None:
        _fd = _os.open(_CHANNEL, _os.O_RDWR)
    try:
        view = memoryview(frame)
        while view:
            view = view[_os.write(_fd, view):]
        head = _read(8)
        hlen = int.from_bytes(head[:4], "big")
        rest = _read(hlen + int.from_bytes(head[4:], "big"))
    except BaseException:
        fd, _fd = _fd, None
        try:
            _os.close(fd)
        except OSError:
            pass
        raise
    return _json.loads(rest[:hlen]), rest[hlen:]


def _read(n):
    buf = _os.read(_fd, n)
    while len(buf) < n:
        more = _os.read(_fd, n - len(buf))
        if not more:
            raise Error("fumehood: the host sent no answer")
        buf += more
    return buf


def call(name, /, **kwargs):
    """Call the host function name with kwargs; return its result."""
    resp, _ = _roundtrip({"op": "call", "name": name, "args": kwargs})
    if resp.get("ok"):
        return resp.get("result")
    err = resp.get("error") or {}
    raise CallError(err.get("message", "host call failed"), function=name, kind=err.get("kind", "error"))
