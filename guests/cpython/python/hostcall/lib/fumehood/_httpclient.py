"""Route http.client (and so urllib.request) through the host.

HTTPConnection.connect gets a stand-in socket that collects the request
http.client writes; when http.client reads the response, the stand-in
parses the request, has the host make it (fumehood.http.request) and hands
back the response's bytes. http.client's own code does the rest.
HTTPSConnection is added, since the guest has no ssl module: the host
speaks TLS.
"""

import io


class _Socket:
    def __init__(self, scheme, host, port):
        self._scheme, self._host, self._port = scheme, host, port
        self._out = bytearray()

    def sendall(self, data):
        self._out += data

    def settimeout(self, _):
        pass

    def setsockopt(self, *_):
        pass

    def close(self):
        pass

    def makefile(self, mode="rb", *args, **kwargs):
        from . import http

        method, target, headers, body = _parse(bytes(self._out))
        self._out = bytearray()
        if target.startswith(("http://", "https://")):
            url = target
        else:
            default = 443 if self._scheme == "https" else 80
            host = self._host if ":" not in self._host else f"[{self._host}]"
            netloc = host if self._port == default else f"{host}:{self._port}"
            url = f"{self._scheme}://{netloc}{target}"
        drop = {"host", "content-length", "transfer-encoding", "connection"}
        try:
            r = http.request(method, url, data=body, headers={k: v for k, v in headers if k.lower() not in drop})
        except Exception as e:
            # HTTPResponse.__init__ calls makefile: raising here would leave
            # a response without fp, whose __del__ then prints "Exception
            # ignored ... no attribute 'fp'" at exit. Raise on its first read
            # instead, where http.client closes the response and passes the
            # error on.
            return _Failed(e)
        head = [f"HTTP/1.1 {r.status} {r.reason or 'Unknown'}"]
        head += [f"{k}: {v}" for k, v in r.headers if k.lower() not in drop]
        head += [f"Content-Length: {len(r.content)}", "Connection: close", "", ""]
        return io.BytesIO("\r\n".join(head).encode("latin-1") + r.content)


class _Failed(io.RawIOBase):
    """A response stream whose first read raises the request's error."""

    def __init__(self, err):
        self._err = err

    def readable(self):
        return True

    def readinto(self, b):
        err, self._err = self._err, None
        if err is None:
            return 0
        try:
            raise err
        finally:
            del err

    def readline(self, size=-1):
        self.readinto(bytearray())
        return b""


def _parse(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = []
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.append((k.strip(), v.strip()))
    if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers):
        body = _unchunk(body)
    return method, target, headers, body


def _unchunk(data):
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2:]
    return bytes(out)


def patch(client):
    """Patch the http.client module client."""

    def connect(self):
        scheme = "https" if isinstance(self, client.HTTPSConnection) else "http"
        self.sock = _Socket(scheme, self.host, self.port)

    client.HTTPConnection.connect = connect

    class HTTPSConnection(client.HTTPConnection):
        """An HTTPS connection made by the host (the guest has no ssl)."""

        default_port = client.HTTPS_PORT

        def __init__(self, host, port=None, *, timeout=None, source_address=None,
                     context=None, check_hostname=None, blocksize=8192, **_):
            if timeout is None:
                super().__init__(host, port, source_address=source_address, blocksize=blocksize)
            else:
                super().__init__(host, port, timeout, source_address, blocksize=blocksize)

    # urllib asks for an SSL context; the host's TLS needs none.
    client._create_https_context = lambda http_version=None: None
    if not hasattr(client, "HTTPSConnection"):
        client.HTTPSConnection = HTTPSConnection
        client.__all__.append("HTTPSConnection")
