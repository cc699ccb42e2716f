"""HTTP requests made by the host, if its network policy allows them.

    from fumehood import http
    r = http.get("https://api.example.com/items", headers={"Accept": "application/json"})
    r.status, r.headers, r.content, r.text, r.json()

Redirects are followed by the host, each hop checked again. A request the
policy refuses raises PolicyError, whose rule names the rule that refused
it. urllib.request.urlopen and http.client go through the same path.
"""

import json as _json

from . import Error, _roundtrip

__all__ = ["get", "post", "request", "Response", "PolicyError", "NetworkError"]


class PolicyError(Error, PermissionError):
    """The host's network policy refused the request; rule names the rule."""

    def __init__(self, message, rule=None):
        super().__init__(message)
        self.message = message
        self.rule = rule

    def __str__(self):
        return self.message


class NetworkError(Error, ConnectionError):
    """The request was allowed but failed (no answer, a bad address, ...)."""

    def __str__(self):
        return self.args[0]


class Response:
    """A response: status, reason, headers (a list of (name, value)), url, content."""

    def __init__(self, status, reason, headers, url, content):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.url = url
        self.content = content

    def header(self, name, default=None):
        """The first value of the header name (any case), or default."""
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    @property
    def text(self):
        return self.content.decode("utf-8", "replace")

    def json(self):
        return _json.loads(self.content)

    def __repr__(self):
        return f"<Response [{self.status}]>"


def request(method, url, data=None, json=None, headers=None):
    """Make an HTTP request through the host; return a Response."""
    headers = dict(headers or {})
    if json is not None:
        data = _json.dumps(json).encode()
        headers.setdefault("Content-Type", "application/json")
    if isinstance(data, str):
        data = data.encode()
    hdrs = [[str(k), str(v)] for k, v in headers.items()]
    resp, body = _roundtrip({"op": "http", "method": method.upper(), "url": url, "headers": hdrs}, data or b"")
    if resp.get("ok"):
        return Response(resp["status"], resp.get("reason", ""), [tuple(kv) for kv in resp.get("headers") or []],
                        resp.get("url", url), body)
    err = resp.get("error") or {}
    message = err.get("message", "request failed")
    if err.get("kind") == "denied":
        raise PolicyError(message, rule=err.get("rule"))
    raise NetworkError(message)


def get(url, headers=None):
    """GET url; return a Response."""
    return request("GET", url, headers=headers)


def post(url, data=None, json=None, headers=None):
    """POST data (bytes or str) or json (encoded as JSON) to url; return a Response."""
    return request("POST", url, data=data, json=json, headers=headers)
