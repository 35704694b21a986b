"""Fuzz target (atheris) for the rendezvous store's request handling.

A real RendezvousServer listens on 127.0.0.1; each input becomes the bytes
one client sends on a fresh TCP connection, after which the client shuts its
write side and reads the answer to EOF.

Input: byte 0 holds flags, the rest is raw HTTP (request line, headers, a
blank line, body; seeds in tests/fuzz/corpus/rendezvous are real requests).
  flag 1: the client knows the secret: the signature headers
          (timestamp, nonce, body digest, signature) are computed from the
          request line and body and inserted after the request line.
  flag 2: ... with a timestamp an hour old (stale).
  flag 4: ... with the body digest of other bytes (altered in transit).
Properties checked for every input:
  - no exception escapes a handler thread (the server's handle_error);
  - every status line is one the server may send (no 500);
  - the server answers or closes within REQUEST_IO_TIMEOUT_SECONDS + 5 s;
  - a request that is not correctly signed (flag 1 clear, or flag 2 or 4
    set) leaves the store unchanged.

Run: python tests/fuzz/fuzz_rendezvous.py [libFuzzer flags] [corpus dir]
(tools/fuzz.sh runs it with the venv in HVD_FUZZ_PYTHON).
"""

import hashlib
import os
import re
import socket
import sys
import time

import atheris

import horovod.common  # noqa: F401  (the package, uninstrumented: it loads the engine's bindings)

with atheris.instrument_imports():
    import http.server  # noqa: F401  (request-line and header parsing)
    from horovod.common import rendezvous

# A signed GET of a missing key would wait up to 30 s: keep fuzzing fast.
rendezvous.MAX_WAIT_SECONDS = 0.05

SECRET = b"fuzz-rendezvous-secret"
# What the handler and http.server may answer: the store's own codes, and
# http.server's for malformed requests (bad syntax or version 400, URI too
# long 414, header too large 431, unknown method 501, HTTP version 505).
ALLOWED_STATUS = {200, 204, 400, 401, 404, 405, 409, 413, 414, 431, 501, 505}
ANSWER_TIMEOUT = rendezvous.REQUEST_IO_TIMEOUT_SECONDS + 5.0
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) ")

handler_errors = []


class _RecordingServer(rendezvous._ThreadingServer):
    def handle_error(self, request, client_address):
        error = sys.exc_info()[1]
        if not isinstance(error, (BrokenPipeError, ConnectionResetError)):
            handler_errors.append(error)
        super().handle_error(request, client_address)


rendezvous._ThreadingServer = _RecordingServer
server = rendezvous.RendezvousServer(SECRET, host="127.0.0.1")
port = server.start()
server.put("present", b"7")
server.put("text", b"not a number")


def _sign(raw, stale, altered):
    """`raw` with correct (or deliberately stale/altered) signature headers inserted."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = raw.partition(b"\n\n")
    first_line, _, rest = head.partition(b"\n")
    parts = first_line.rstrip(b"\r").split(b" ")
    if len(parts) < 2:
        return raw
    method = parts[0].decode("latin-1")
    target = parts[1].decode("latin-1")
    timestamp = int(time.time()) - (3600 if stale else 0)
    nonce = os.urandom(12).hex()
    digest = hashlib.sha256(body + (b"x" if altered else b"")).hexdigest()
    try:
        canonical = rendezvous._request_canonical(method, target, timestamp, nonce, digest)
    except UnicodeEncodeError:
        return raw  # a method that is not ASCII cannot be signed
    signature = rendezvous._hmac_hex(SECRET, canonical)
    headers = ("%s: %d\r\n%s: %s\r\n%s: %s\r\n%s: %s\r\n" % (
        rendezvous.HEADER_TIMESTAMP, timestamp, rendezvous.HEADER_NONCE, nonce,
        rendezvous.HEADER_CONTENT_SHA256, digest, rendezvous.HEADER_SIGNATURE, signature)).encode("ascii")
    return first_line + b"\n" + headers + rest + sep + body


def _snapshot():
    with server._table._changed:
        return dict(server._table._data)


def TestOneInput(data):
    if not data:
        return
    flags, raw = data[0], data[1:]
    signed = bool(flags & 1)
    if signed:
        raw = _sign(raw, stale=bool(flags & 2), altered=bool(flags & 4))
    authentic = signed and not flags & 6
    before = None if authentic else _snapshot()
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT) as s:
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading everything
        answer = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except ConnectionResetError:
            pass
        except socket.timeout:
            raise AssertionError("the server neither answered nor closed within %.0f s" % ANSWER_TIMEOUT)
    if handler_errors:
        raise AssertionError("a request handler raised %r" % (handler_errors[0],))
    # The first answer's status (a body may hold anything, a further answer
    # to a pipelined request follows it).
    match = _STATUS_LINE.match(answer)
    if match:
        status = int(match.group(1))
        if status not in ALLOWED_STATUS:
            raise AssertionError("status %d answered to %r" % (status, raw[:200]))
    if before is not None and _snapshot() != before:
        raise AssertionError("a request that was not correctly signed changed the store: %r" % (raw[:200],))


def main():
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
