# rendezvous.py - the job's rendezvous key-value store: the HTTP server the
# launcher runs and a Python client, speaking the HMAC-signed protocol of
# docs/rendezvous.md (the engine's C++ client is src/rendezvous/http_store.cc).
"""Rendezvous key-value store for hvd jobs.

The launcher starts a :class:`RendezvousServer` with a per-job secret made by
:func:`make_secret` and hands ``HOROVOD_GLOO_RENDEZVOUS_ADDR``,
``HOROVOD_GLOO_RENDEZVOUS_PORT`` and ``HOROVOD_SECRET_KEY`` to the workers.
Every request must be signed with that secret; anything else is rejected with
401, logged and counted, and never applied.
"""

import hashlib
import hmac
import http.client
import http.server
import logging
import math
import re
import secrets
import socket
import sys
import threading
import time
import urllib.parse

__all__ = [
    "RendezvousServer",
    "RendezvousClient",
    "RendezvousError",
    "RendezvousTimeoutError",
    "RendezvousAuthError",
    "make_secret",
]

logger = logging.getLogger("horovod.rendezvous")

PROTOCOL_TAG = b"hvd-rendezvous-v1"
RESPONSE_TAG = b"hvd-rendezvous-v1-response"
HEADER_TIMESTAMP = "X-Hvd-Timestamp"
HEADER_NONCE = "X-Hvd-Nonce"
HEADER_SIGNATURE = "X-Hvd-Signature"
# The body's SHA-256 (hex), which the signature covers: the server checks the
# signature against it before it reads a single byte of the body, so a client
# without the secret cannot make the store buffer its uploads.
HEADER_CONTENT_SHA256 = "X-Hvd-Content-SHA256"
# Requests signed further than this from the server's clock are refused, and
# nonces are remembered exactly this long (a replay after that is stale).
MAX_CLOCK_SKEW_SECONDS = 300
# One long-poll holds a server thread; capping it bounds how long a vanished
# client can occupy one. Clients repeat the request to wait longer.
MAX_WAIT_SECONDS = 30.0
MAX_BODY_BYTES = 16 * 1024 * 1024
# A client gets this long for each read of its request (request line, headers,
# body) and each write of the answer; one that stalls longer loses its
# connection, so silent connections cannot hold server threads.
REQUEST_IO_TIMEOUT_SECONDS = 10.0
# A client gets this long in all for a request's line and headers (and, when
# it is refused, the body the store drains): one that sends a byte now and
# then never trips the per-read timeout above, and would otherwise keep its
# thread, and with MAX_CONCURRENT_CONNECTIONS of them the store, for ever.
# Authenticated requests are not limited (a long-poll is one).
REQUEST_HEAD_SECONDS = 10.0
# Connections served at once (one thread each). A job needs a few per rank;
# the rest wait in the listen backlog until a thread is free.
MAX_CONCURRENT_CONNECTIONS = 1024
LISTEN_BACKLOG = 1024
# A rejected request is logged individually up to this many times, then as
# one summary line at most every REJECTION_SUMMARY_SECONDS.
REJECTIONS_LOGGED_INDIVIDUALLY = 20
REJECTION_SUMMARY_SECONDS = 60.0
# Unauthenticated bodies up to this size are read and dropped so the client
# reads a clean 401; larger ones are not read at all (the connection closes).
_DRAIN_REJECTED_BODY_BYTES = 64 * 1024
_HEX_SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")
_NONCE_PATTERN = re.compile(r"^[A-Za-z0-9_-]{8,128}$")
_UNRESERVED = "-._~"


class RendezvousError(RuntimeError):
    """A rendezvous store operation failed (store unreachable or misbehaving)."""


class RendezvousTimeoutError(RendezvousError, TimeoutError):
    """A key did not appear in the store before the timeout."""


class RendezvousAuthError(RendezvousError):
    """The store rejected our signature, or the responder is not the job's store."""


def make_secret():
    """Returns a new job secret: the hex encoding of 32 random bytes.

    Returns:
        A 64-character lower-case hex string, suitable for ``HOROVOD_SECRET_KEY``.
    """
    return secrets.token_hex(32)


def _sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def _request_canonical(method, target, timestamp, nonce, body_sha256_hex):
    return b"\n".join([
        PROTOCOL_TAG, method.encode("ascii"), target.encode("latin-1"),
        str(timestamp).encode("ascii"), nonce.encode("ascii"),
        body_sha256_hex.encode("ascii")])


def _printable(text, limit=80):
    """`text` (client-controlled) made safe for one log line: escaped, cut to `limit` characters."""
    escaped = text.encode("unicode_escape").decode("ascii")
    return escaped if len(escaped) <= limit else escaped[:limit] + "...(%d characters)" % len(escaped)


def _response_canonical(status, nonce, body):
    return b"\n".join([
        RESPONSE_TAG, str(status).encode("ascii"), nonce.encode("ascii"),
        _sha256_hex(body).encode("ascii")])


def _hmac_hex(key, message):
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _key_bytes(key):
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def _encode_key(key):
    return urllib.parse.quote_from_bytes(_key_bytes(key), safe=_UNRESERVED)


class _KeyValueTable:
    """The store's data: bytes keys to bytes values, with waiting readers."""

    def __init__(self):
        self._data = {}
        self._changed = threading.Condition()
        self._watchers = []

    def watch(self, callback):
        self._watchers.append(callback)

    def _tell_watchers(self, key, value):
        for callback in list(self._watchers):
            callback(key, value)

    def set(self, key, value):
        with self._changed:
            self._data[key] = value
            self._changed.notify_all()
        self._tell_watchers(key, value)

    def get(self, key, wait_seconds):
        deadline = time.monotonic() + wait_seconds
        with self._changed:
            while key not in self._data:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(remaining)
            return self._data[key]

    def add(self, key, delta):
        """Returns the new value, or raises ValueError when the present value is not an integer."""
        with self._changed:
            current = int(self._data.get(key, b"0"))
            new_value = current + delta
            self._data[key] = str(new_value).encode("ascii")
            self._changed.notify_all()
        self._tell_watchers(key, str(new_value).encode("ascii"))
        return new_value

    def delete(self, key):
        with self._changed:
            self._data.pop(key, None)


class _NonceRegistry:
    """Nonces of accepted requests, kept until a replay would be stale anyway."""

    def __init__(self):
        self._expiry_by_nonce = {}
        self._lock = threading.Lock()
        self._next_prune = 0.0

    def claim(self, nonce, timestamp, now):
        """Records `nonce`; returns False when it was already used."""
        with self._lock:
            if now >= self._next_prune:
                self._expiry_by_nonce = {
                    n: t for n, t in self._expiry_by_nonce.items() if t >= now}
                self._next_prune = now + 30.0
            if nonce in self._expiry_by_nonce:
                return False
            self._expiry_by_nonce[nonce] = timestamp + MAX_CLOCK_SKEW_SECONDS + 1
            return True


class _SignedRequestHandler(http.server.BaseHTTPRequestHandler):
    # HTTP/1.1 so responses carry Content-Length and clients may keep the
    # connection; ours send "Connection: close".
    protocol_version = "HTTP/1.1"
    server_version = "hvd-rendezvous/1"
    # The socket timeout of every read and write (StreamRequestHandler applies it).
    timeout = REQUEST_IO_TIMEOUT_SECONDS

    def do_GET(self):
        self._handle("GET")

    def do_PUT(self):
        self._handle("PUT")

    def do_POST(self):
        self._handle("POST")

    def do_DELETE(self):
        self._handle("DELETE")

    def _method_not_allowed(self):
        # Any other method: 405 (BaseHTTPRequestHandler would answer 501),
        # without reading a body.
        self.close_connection = True
        self._send_plain(405, b"method not allowed\n", allow="GET, PUT, POST, DELETE")

    do_PATCH = do_HEAD = do_OPTIONS = do_TRACE = do_CONNECT = _method_not_allowed

    def handle_one_request(self):
        self.server.arm_head_deadline(self.connection)
        try:
            super().handle_one_request()
        finally:
            self.server.disarm_head_deadline(self.connection)

    def log_message(self, format, *args):
        # The default writes every request to stderr; only verbose servers log them.
        if self.server.rendezvous.verbose:
            logger.info("%s - %s", self.address_string(), format % args)

    def _handle(self, method):
        rendezvous = self.server.rendezvous
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send_plain(413 if length > MAX_BODY_BYTES else 400, b"bad Content-Length\n")
            return
        # The headers alone prove the client holds the secret (the signature
        # covers the body's claimed digest), so nothing of an unauthenticated
        # body is buffered.
        reason, timestamp, nonce = rendezvous._authenticate(method, self.path, self.headers)
        if reason is None:
            self.server.disarm_head_deadline(self.connection)
            body = self.rfile.read(length) if length else b""
            if len(body) != length:
                self.close_connection = True
                return  # the client went away mid-body: nothing to answer
            if not hmac.compare_digest(_sha256_hex(body), self.headers[HEADER_CONTENT_SHA256].lower()):
                reason = "body does not match its signed digest (altered in transit)"
            elif not rendezvous._nonces.claim(nonce, timestamp, time.time()):
                reason = "replayed request (nonce already used)"
        elif length <= _DRAIN_REJECTED_BODY_BYTES:
            self.rfile.read(length)  # small: read it so the client sees the 401 cleanly
        else:
            self.close_connection = True
        if reason is not None:
            rendezvous._record_rejection(self.client_address, method, self.path, reason)
            self._send_plain(401, ("rejected: %s\n" % reason).encode("ascii"))
            return
        status, response_body = rendezvous._dispatch(method, self.path, body)
        self._send_signed(status, response_body, nonce)

    def _send_plain(self, status, body, allow=None):
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        if allow:
            self.send_header("Allow", allow)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _send_signed(self, status, body, nonce):
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header(HEADER_SIGNATURE, _hmac_hex(
            self.server.rendezvous._key, _response_canonical(status, nonce, body)))
        self.end_headers()
        if body:
            self.wfile.write(body)


class _ThreadingServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # The launcher may restart on the same port right after a failed job.
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, *args, **kwargs):
        # Taken by the accepting thread before a connection gets its thread and
        # given back when that thread ends: at most this many are served at
        # once, and the accept loop waits (connections queue in the backlog)
        # rather than starting threads without bound.
        self._connection_slots = threading.BoundedSemaphore(MAX_CONCURRENT_CONNECTIONS)
        self.stopping = threading.Event()  # set before shutdown(): stop waiting for a slot
        self._head_deadlines = {}  # connection -> monotonic time its request head must be in by
        self._head_deadlines_lock = threading.Lock()
        super().__init__(*args, **kwargs)
        self._reaper = threading.Thread(target=self._close_late_requests, name="hvd-rendezvous-reaper",
                                        daemon=True)
        self._reaper.start()

    def arm_head_deadline(self, connection):
        with self._head_deadlines_lock:
            self._head_deadlines[connection] = time.monotonic() + REQUEST_HEAD_SECONDS

    def disarm_head_deadline(self, connection):
        with self._head_deadlines_lock:
            self._head_deadlines.pop(connection, None)

    def _close_late_requests(self):
        # Shutting a late connection down makes its thread's blocked read
        # return end-of-file, so the thread ends and frees its slot.
        while not self.stopping.wait(0.25):
            now = time.monotonic()
            with self._head_deadlines_lock:
                late = [c for c, deadline in self._head_deadlines.items() if deadline <= now]
                for c in late:
                    del self._head_deadlines[c]
            for c in late:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by its thread

    def process_request(self, request, client_address):
        while not self._connection_slots.acquire(timeout=0.1):
            if self.stopping.is_set():
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._connection_slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connection_slots.release()

    def handle_error(self, request, client_address):
        # A client that went away (a worker stopped while it waited for a key)
        # is no error of the store's; anything else is reported as usual.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class RendezvousServer:
    """The job's rendezvous key-value store, served over signed HTTP.

    Args:
        secret: The job secret (from :func:`make_secret`); every request must be
            signed with it.
        host: Interface to listen on; ``"0.0.0.0"`` accepts all.
        port: TCP port; 0 picks a free one (see :attr:`port` after :meth:`start`).
        verbose: Log every accepted request on the ``horovod.rendezvous`` logger.

    Rejected requests (unsigned, wrongly signed, stale or replayed) get 401,
    are logged as warnings with the client address, counted in
    :attr:`rejected_requests`, and are never applied.
    """

    def __init__(self, secret, host="0.0.0.0", port=0, verbose=False):
        if not secret:
            raise ValueError("RendezvousServer needs a non-empty job secret")
        self._key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        self.host = host
        self.port = port
        self.verbose = verbose
        self._table = _KeyValueTable()
        self._nonces = _NonceRegistry()
        self._rejections_lock = threading.Lock()
        self._rejected_requests = 0
        self._rejections_not_logged = 0
        self._next_rejection_summary = 0.0
        self._httpd = None
        self._thread = None

    @property
    def rejected_requests(self):
        """Number of requests rejected with 401 since the server was created."""
        with self._rejections_lock:
            return self._rejected_requests

    def start(self):
        """Starts serving in a daemon thread.

        Returns:
            The TCP port the server listens on.

        Raises:
            RuntimeError: The server is already running.
            OSError: The address could not be bound.
        """
        if self._httpd is not None:
            raise RuntimeError("RendezvousServer is already running on port %d" % self.port)
        httpd = _ThreadingServer((self.host, self.port), _SignedRequestHandler)
        httpd.rendezvous = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
            name="hvd-rendezvous-server", daemon=True)
        self._thread.start()
        if self.verbose:
            if not logger.handlers and not logging.getLogger().handlers:
                # Without any logging configured, INFO records would be dropped.
                handler = logging.StreamHandler()
                handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
                logger.addHandler(handler)
            if logger.getEffectiveLevel() > logging.INFO:
                logger.setLevel(logging.INFO)
            logger.info("rendezvous server listening on %s:%d", self.host, self.port)
        return self.port

    def stop(self):
        """Stops serving and closes the listening socket. Idempotent."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        self._thread.join()
        httpd._reaper.join()
        self._thread = None

    def __enter__(self):
        self.start()
        return self

    # -- in-process access, for the launcher that runs the store ------------

    def put(self, key, value):
        """Sets `key` (str or bytes) to `value` (bytes) directly, as a signed PUT would."""
        self._table.set(_key_bytes(key), value)

    def read(self, key, wait=0.0):
        """The value of `key` (str or bytes), waiting up to `wait` seconds for it; None if absent."""
        return self._table.get(_key_bytes(key), wait)

    def remove(self, key):
        """Deletes `key` (str or bytes) if present."""
        self._table.delete(_key_bytes(key))

    def watch(self, callback):
        """Calls ``callback(key, value)`` (bytes, bytes) after every set or add, whoever made it.

        The callback runs on the thread that changed the key (a request
        handler thread, or the caller of ``put``): it must be quick and must
        not block.
        """
        self._table.watch(callback)

    def __exit__(self, *exc_info):
        self.stop()

    # -- request processing (called from the handler threads) --------------

    def _authenticate(self, method, target, headers):
        """Checks a request's signature headers, before its body is read.

        Returns (None, timestamp, nonce) when the signature over the claimed
        body digest is good and the request is fresh, else (reason, None, None).
        The caller then checks the body against the digest and claims the
        nonce, so neither unsigned traffic nor a body altered in transit can
        use up a legitimate client's nonce.
        """
        timestamp_text = headers.get(HEADER_TIMESTAMP)
        nonce = headers.get(HEADER_NONCE)
        signature = headers.get(HEADER_SIGNATURE)
        body_digest = headers.get(HEADER_CONTENT_SHA256)
        if timestamp_text is None or nonce is None or signature is None or body_digest is None:
            return "unsigned request (missing signature headers)", None, None
        try:
            timestamp = int(timestamp_text)
        except ValueError:
            return "malformed timestamp", None, None
        if not _NONCE_PATTERN.match(nonce):
            return "malformed nonce", None, None
        body_digest = body_digest.strip().lower()
        if not _HEX_SHA256_PATTERN.match(body_digest):
            return "malformed body digest", None, None
        expected = _hmac_hex(self._key, _request_canonical(method, target, timestamp, nonce, body_digest))
        if not hmac.compare_digest(expected.encode("ascii"), signature.strip().lower().encode("latin-1")):
            return "bad signature (wrong secret or request altered)", None, None
        now = time.time()
        if abs(now - timestamp) > MAX_CLOCK_SKEW_SECONDS:
            return "stale request (timestamp %+.0f s from server clock)" % (timestamp - now), None, None
        return None, timestamp, nonce

    def _record_rejection(self, client_address, method, target, reason):
        # Counted always; logged line by line only at first, then summarised,
        # so a flood of bad requests cannot flood the launcher's log.
        now = time.monotonic()
        with self._rejections_lock:
            self._rejected_requests += 1
            individually = self._rejected_requests <= REJECTIONS_LOGGED_INDIVIDUALLY
            summary = None
            if not individually:
                self._rejections_not_logged += 1
                if now >= self._next_rejection_summary:
                    summary, self._rejections_not_logged = self._rejections_not_logged, 0
                    self._next_rejection_summary = now + REJECTION_SUMMARY_SECONDS
        if individually:
            logger.warning("rendezvous: rejected %s %s from %s:%s: %s", method, _printable(target),
                           client_address[0], client_address[1], reason)
        elif summary:
            logger.warning("rendezvous: rejected %d more request(s) (%d in all), the latest %s %s from %s: %s; "
                           "further rejections are summarised at most every %.0f s",
                           summary, self._rejected_requests, method, _printable(target), client_address[0],
                           reason, REJECTION_SUMMARY_SECONDS)

    def _dispatch(self, method, target, body):
        """Applies an authenticated request; returns (status, body)."""
        # A signed target is still arbitrary text: urlsplit refuses some
        # absolute forms ("http://[::1/...", an unclosed IPv6 host) with
        # ValueError, which would end the handler thread without an answer.
        try:
            split = urllib.parse.urlsplit(target)
        except ValueError:
            return 400, b"malformed request target\n"
        query = urllib.parse.parse_qs(split.query)
        if split.path.startswith("/v1/kv/"):
            key = urllib.parse.unquote_to_bytes(split.path[len("/v1/kv/"):])
            if method == "PUT":
                self._table.set(key, body)
                return 204, b""
            if method == "GET":
                try:
                    wait = float(query.get("wait", ["0"])[0])
                except ValueError:
                    wait = math.nan
                if not math.isfinite(wait):
                    return 400, b"bad wait parameter (a finite number of seconds)\n"
                wait = min(max(wait, 0.0), MAX_WAIT_SECONDS)
                value = self._table.get(key, wait)
                return (404, b"") if value is None else (200, value)
            if method == "DELETE":
                self._table.delete(key)
                return 204, b""
            return 405, b""
        if split.path.startswith("/v1/add/"):
            if method != "POST":
                return 405, b""
            key = urllib.parse.unquote_to_bytes(split.path[len("/v1/add/"):])
            try:
                delta = int(body)
            except ValueError:
                return 400, b"add delta must be an ASCII decimal integer\n"
            try:
                return 200, str(self._table.add(key, delta)).encode("ascii")
            except ValueError:
                return 409, b"present value is not an integer\n"
        return 404, b""


class RendezvousClient:
    """Client of the job's rendezvous store.

    Args:
        addr: Host name or address of the store.
        port: Its TCP port.
        secret: The job secret; every request is signed with it.
        timeout: Default seconds for :meth:`get` to wait, and the bound for
            retrying an unreachable store in every operation.
    """

    def __init__(self, addr, port, secret, timeout=30):
        self.addr = addr
        self.port = int(port)
        self.timeout = float(timeout)
        self._key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)

    def _describe(self):
        return "rendezvous store %s:%d" % (self.addr, self.port)

    def set(self, key, value):
        """Stores `value` (bytes) under `key`, replacing any previous value.

        Raises:
            RendezvousError: The store could not be reached within the timeout.
            RendezvousAuthError: The store rejected the request or is not the job's.
        """
        if isinstance(value, str):
            value = value.encode("utf-8")
        self._call("PUT", "/v1/kv/" + _encode_key(key), bytes(value),
                   expect=(204,), what="set %r" % (key,))

    def get(self, key, timeout=None):
        """Returns the value of `key`, waiting until some client sets it.

        Args:
            key: The key (str or bytes).
            timeout: Seconds to wait; None uses the client's timeout.

        Returns:
            The value as bytes.

        Raises:
            RendezvousTimeoutError: `key` did not appear within `timeout`.
            RendezvousAuthError: The store rejected the request or is not the job's.
        """
        timeout = self.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + timeout
        path = "/v1/kv/" + _encode_key(key)
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            wait = min(remaining, MAX_WAIT_SECONDS)
            status, body = self._call(
                "GET", "%s?wait=%.3f" % (path, wait), b"", expect=(200, 404),
                what="get %r" % (key,), deadline=deadline)
            if status == 200:
                return body
            if time.monotonic() >= deadline:
                raise RendezvousTimeoutError(
                    "key %r did not appear in the %s within %.1f s; the rank that "
                    "should set it may have failed or not started" % (key, self._describe(), timeout))

    def add(self, key, delta):
        """Atomically adds `delta` to the integer at `key` (absent counts as 0).

        Returns:
            The new value (int).

        Raises:
            RendezvousError: The store could not be reached, or the value is not an integer.
        """
        _, body = self._call("POST", "/v1/add/" + _encode_key(key), str(int(delta)).encode("ascii"),
                             expect=(200,), what="add to %r" % (key,), idempotent=False)
        return int(body)

    def delete(self, key):
        """Removes `key` from the store; removing an absent key is not an error."""
        self._call("DELETE", "/v1/kv/" + _encode_key(key), b"", expect=(204,),
                   what="delete %r" % (key,))

    def _call(self, method, target, body, expect, what, deadline=None, idempotent=True):
        """Sends one signed request, retrying transport failures until `deadline`."""
        started = time.monotonic()
        if deadline is None:
            deadline = started + self.timeout
        backoff = 0.05
        while True:
            try:
                return self._send_once(method, target, body, expect, what, deadline)
            except _ConnectFailed as e:
                failure = e.cause
            except (OSError, http.client.HTTPException) as e:
                if not idempotent:
                    raise RendezvousError("%s at the %s failed after the request was sent (%s); "
                                          "not retried since it may have been applied"
                                          % (what, self._describe(), e)) from e
                failure = e
            if time.monotonic() + backoff >= deadline:
                raise RendezvousError("cannot reach the %s to %s: %s (gave up after %.1f s); check "
                                      "HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT and that the launcher is running"
                                      % (self._describe(), what, failure, time.monotonic() - started)) from failure
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def _send_once(self, method, target, body, expect, what, deadline):
        timestamp = int(time.time())
        nonce = secrets.token_hex(16)
        body_digest = _sha256_hex(body)
        signature = _hmac_hex(self._key, _request_canonical(method, target, timestamp, nonce, body_digest))
        # The socket timeout must outlast the server-side long-poll.
        io_timeout = max(1.0, deadline - time.monotonic()) + 10.0
        connection = http.client.HTTPConnection(self.addr, self.port, timeout=io_timeout)
        try:
            try:
                connection.connect()
            except OSError as e:
                raise _ConnectFailed(e) from e
            connection.request(method, target, body=body, headers={
                "Connection": "close",
                "Content-Length": str(len(body)),
                HEADER_TIMESTAMP: str(timestamp),
                HEADER_NONCE: nonce,
                HEADER_SIGNATURE: signature,
                HEADER_CONTENT_SHA256: body_digest,
            })
            response = connection.getresponse()
            response_body = response.read()
            status = response.status
            response_signature = response.getheader(HEADER_SIGNATURE)
        finally:
            connection.close()
        if status == 401:
            raise RendezvousAuthError(
                "the %s rejected %s: %s (is HOROVOD_SECRET_KEY the job's secret, and is this "
                "host's clock within %d s of the store's?)"
                % (self._describe(), what, response_body.decode("latin-1").strip(),
                   MAX_CLOCK_SKEW_SECONDS))
        expected = _hmac_hex(self._key, _response_canonical(status, nonce, response_body))
        if response_signature is None or not hmac.compare_digest(
                expected.encode("ascii"), response_signature.strip().lower().encode("latin-1")):
            raise RendezvousAuthError(
                "the response from %s to %s is not signed with the job secret: the address "
                "is not this job's rendezvous store, or its secret differs" % (self._describe(), what))
        if status not in expect:
            raise RendezvousError("%s at the %s failed: HTTP %d %s"
                                  % (what, self._describe(), status,
                                     response_body.decode("latin-1").strip()))
        return status, response_body


class _ConnectFailed(Exception):
    """The TCP connection could not be opened: nothing reached the server, so any request may be retried."""

    def __init__(self, cause):
        super().__init__(str(cause))
        self.cause = cause
