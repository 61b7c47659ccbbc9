"""A flaky object store: an HTTP proxy in front of an S3 endpoint (moto_server) that fails a seeded fraction
of the requests, the ways a real store and the network between fail:

* ``500``, ``503``: an error answered without forwarding (the request did nothing);
* ``reset``: the connection reset without forwarding;
* ``500 after``: forwarded (the store did it), then an error answered instead of the store's answer;
* ``reset after``: forwarded, then the connection reset before any answer;
* ``cut after``: forwarded, then the store's answer cut after half its body (a read that breaks off).

Whether a request fails, and how, is drawn from ``(seed, method, path, n)`` (the path without its bucket, whose name
a test draws, and with snapshot ids as ``ID``: their content addresses change with the package's version), ``n``
counting the requests of that method and path so far: the same requests fail the same way whatever order concurrent
clients send them in, and a retried request draws again.

:class:`ManifestWatch` checks the store after every change it makes (the proxy forwards changes one at a time):
a snapshot's ``manifest.json`` is never there without every file it lists, at its size.
"""

import http.client
import json
import random
import re
import socket
import struct
import threading
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import botocore.session

FAULTS = ("500", "503", "reset", "500 after", "reset after", "cut after")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te", "trailer"}
Watch = Callable[[str, str, bytes], None]  # (method, path, body) of a change the store has just made
Answer = tuple[int, list[tuple[str, str]], bytes]  # status, headers, body


class FlakyProxy:
    """A proxy to ``upstream`` on a free loopback port (``url``) failing a ``rate`` of the requests that ``only``
    (a regular expression searched in ``"METHOD /path?query"``; default all) finds, each with one of ``kinds``
    (default all of :data:`FAULTS`); a context manager. Changes (PUT, POST, DELETE) are forwarded one at a time,
    each followed by ``watch``. ``faults`` counts what it did by (method, fault), ``requests`` the requests by
    method."""

    def __init__(
        self,
        upstream: str,
        rate: float,
        seed: int,
        only: str = "",
        kinds: tuple[str, ...] = FAULTS,
        watch: Watch | None = None,
    ):
        if not 0 <= rate <= 1:
            raise ValueError(f"rate must be in [0, 1], got {rate}")
        if unknown := set(kinds) - set(FAULTS):
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {FAULTS}")
        self.upstream, self.rate, self.seed = urlsplit(upstream).netloc, rate, seed
        self.only, self.kinds, self.watch = re.compile(only), kinds, watch
        self.faults: Counter[tuple[str, str]] = Counter()
        self.requests: Counter[str] = Counter()
        self._seen: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._changing = threading.Lock()  # held while a change is forwarded and watched
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "FlakyProxy":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def draw(self, method: str, path: str) -> str | None:
        """The fault of this request (None: it goes through), counted."""
        key = re.sub(r"^/[^/?]*", "", path)  # /bucket/key?query -> /key?query, /bucket?query -> ?query
        key = re.sub(r"\b[0-9a-f]{16}\b", "ID", key)  # a snapshot's content address: its files fail as any version's
        with self._lock:
            n = self._seen[method, key]
            self._seen[method, key] += 1
            self.requests[method] += 1
            rng = random.Random(f"{self.seed}:{method}:{key}:{n}")
            fails = rng.random() < self.rate and self.only.search(f"{method} {path}") is not None
            fault = rng.choice(self.kinds) if fails else None
            if fault is not None:
                self.faults[method, fault] += 1
            return fault


def _handler(proxy: FlakyProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects

        def log_message(self, *args) -> None:  # quiet
            pass

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except (ConnectionError, socket.timeout):  # the client went away
                self.close_connection = True

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _reset(self) -> None:
            """Close the connection with a TCP reset (SO_LINGER 0), as a dropped one looks to the client."""
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True

        def _error(self, status: int) -> None:
            body = (
                f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>"
                f"{'InternalError' if status == 500 else 'SlowDown'}</Code><Message>injected</Message></Error>"
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":  # an answer to HEAD has no body
                self.wfile.write(body)

        def _forward(self, body: bytes) -> Answer:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                headers["Content-Length"] = str(len(body))
            if self.command in ("GET", "HEAD"):
                return _send(proxy.upstream, self.command, self.path, body, headers)
            with proxy._changing:
                answer = _send(proxy.upstream, self.command, self.path, body, headers)
                if proxy.watch is not None and answer[0] < 300:
                    proxy.watch(self.command, self.path, body)
                return answer

        def _proxy(self) -> None:
            body = self._body()
            fault = proxy.draw(self.command, self.path)
            if fault in ("500", "503"):
                return self._error(int(fault))
            if fault == "reset":
                return self._reset()
            status, headers, answer = self._forward(body)
            if fault == "500 after":
                return self._error(500)
            if fault == "reset after" or (fault == "cut after" and len(answer) < 2):
                return self._reset()
            self.send_response(status)
            for key, value in headers:
                if key.lower() not in HOP_BY_HOP and not (key.lower() == "content-length" and self.command != "HEAD"):
                    self.send_header(key, value)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            if fault == "cut after":
                self.wfile.write(answer[: len(answer) // 2])
                return self._reset()
            self.wfile.write(answer)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _proxy

    return Handler


def _send(upstream: str, method: str, path: str, body: bytes, headers: dict) -> Answer:
    conn = http.client.HTTPConnection(upstream, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        conn.close()


class ManifestWatch:
    """A :data:`Watch` of ``bucket`` at ``endpoint`` (the store itself, not the proxy): after every change, each
    ``manifest.json`` must have every file it lists, at its size. A batch delete (DeleteObjects) is one delete per
    key in no set order (S3 does not make it atomic), so one that holds a manifest and a file of its snapshot is a
    moment without that file too. What breaks this is kept in ``violations``."""

    def __init__(self, endpoint: str, bucket: str):
        self.bucket = bucket
        self.s3 = botocore.session.get_session().create_client("s3", endpoint_url=endpoint)
        self.violations: list[str] = []
        self.checks = 0
        self._manifests: dict[tuple[str, str], dict] = {}  # (key, ETag) -> its files

    def __call__(self, method: str, path: str, body: bytes) -> None:
        self.checks += 1
        try:
            self._check(method, path, body)
        except Exception as e:  # in the proxy's thread: kept, to fail the test, not lost with the connection
            self.violations.append(f"the watch failed after {method} {unquote(path)}: {e!r}")

    def _check(self, method: str, path: str, body: bytes) -> None:
        if method == "POST" and "delete" in urlsplit(path).query.split("&"):
            keys = [e.text for e in ET.fromstring(body).iter() if e.tag.rsplit("}", 1)[-1] == "Key"]
            for key in keys:
                if key.endswith("/manifest.json") and any(
                    k != key and k.startswith(key.removesuffix("manifest.json")) for k in keys
                ):
                    self.violations.append(f"{method} {unquote(path)}: {key} deleted in one batch with its files")
        sizes, etags = {}, {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            for item in page.get("Contents", []):
                sizes[item["Key"]], etags[item["Key"]] = item["Size"], item["ETag"]
        for key in [k for k in sizes if k.endswith("/manifest.json")]:
            files = self._files(key, etags[key])
            folder = key.removesuffix("manifest.json")
            wrong = sorted(p for p, entry in files.items() if sizes.get(folder + p) != entry["bytes"])
            if wrong:
                self.violations.append(f"after {method} {unquote(path)}: {key} without {wrong[:3]} ({len(wrong)})")

    def _files(self, key: str, etag: str) -> dict:
        if (key, etag) not in self._manifests:
            text = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            self._manifests[key, etag] = json.loads(text)["files"]
        return self._manifests[key, etag]
