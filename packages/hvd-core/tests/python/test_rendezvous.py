# test_rendezvous.py - the rendezvous store: Python server and client
# behaviour, the signed-request rules of docs/rendezvous.md (checked with
# requests signed here by hand), and the engine's C++ client
# (tests/rendezvous_cpp) driven against the Python server.
import hashlib
import hmac
import http.client
import http.server
import logging
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[2]
try:
    import horovod.common.rendezvous  # noqa: F401
except ImportError:  # running from a source checkout without installing
    sys.path.insert(0, str(PACKAGE_ROOT / "python"))

from horovod.common.rendezvous import (RendezvousAuthError, RendezvousClient, RendezvousError,  # noqa: E402
                                       RendezvousServer, RendezvousTimeoutError, make_secret)
from horovod.common import rendezvous  # noqa: E402


@pytest.fixture
def secret():
    return make_secret()


@pytest.fixture
def server(secret):
    srv = RendezvousServer(secret, host="127.0.0.1")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server, secret):
    return RendezvousClient("127.0.0.1", server.port, secret, timeout=10)


def _send_signed(port, secret, method, target, body=b"", timestamp=None, nonce=None,
                 signed_body=None, signed_target=None, sign=True):
    """Sends one request signed as docs/rendezvous.md specifies, independently
    of the client under test, with knobs to forge each signed part.
    Returns (status, body, headers, nonce)."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    nonce = secrets.token_hex(16) if nonce is None else nonce
    signed_body = body if signed_body is None else signed_body
    signed_target = target if signed_target is None else signed_target
    headers = {"Connection": "close"}
    if sign:
        canonical = b"\n".join([
            b"hvd-rendezvous-v1", method.encode(), signed_target.encode(), str(timestamp).encode(),
            nonce.encode(), hashlib.sha256(signed_body).hexdigest().encode()])
        headers.update({
            "X-Hvd-Timestamp": str(timestamp),
            "X-Hvd-Nonce": nonce,
            "X-Hvd-Signature": hmac.new(secret.encode(), canonical, hashlib.sha256).hexdigest(),
            "X-Hvd-Content-SHA256": hashlib.sha256(signed_body).hexdigest(),
        })
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, target, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read(), dict(response.getheaders()), nonce
    finally:
        conn.close()


# -- behaviour -----------------------------------------------------------------

def test_make_secret_is_64_hex_chars_and_fresh():
    a, b = make_secret(), make_secret()
    assert len(a) == 64 and int(a, 16) >= 0
    assert a != b


def test_set_then_get_returns_value(client):
    client.set("rank/0", b"10.0.0.5:4000")
    assert client.get("rank/0") == b"10.0.0.5:4000"


def test_keys_and_values_may_hold_any_bytes(client):
    key = "odd key/with ?query&chars=1#frag%20 and ünicode"
    value = bytes(range(256)) * 10
    client.set(key, value)
    assert client.get(key) == value
    client.set(b"\x00\xffbinary-key", b"")
    assert client.get(b"\x00\xffbinary-key") == b""


def test_set_replaces_value(client):
    client.set("k", b"old")
    client.set("k", b"new")
    assert client.get("k") == b"new"


def test_get_waits_for_a_value_set_later(client):
    writer = threading.Timer(0.5, client.set, args=("late", b"here"))
    start = time.monotonic()
    writer.start()
    try:
        assert client.get("late", timeout=10) == b"here"
    finally:
        writer.join()
    assert 0.4 <= time.monotonic() - start < 5


def test_get_of_missing_key_times_out_naming_key_and_store(client, server):
    start = time.monotonic()
    with pytest.raises(RendezvousTimeoutError) as info:
        client.get("never/set", timeout=0.5)
    assert 0.45 <= time.monotonic() - start < 3
    message = str(info.value)
    assert "never/set" in message and str(server.port) in message
    assert isinstance(info.value, TimeoutError)


def test_get_with_zero_timeout_looks_once(client):
    with pytest.raises(RendezvousTimeoutError):
        client.get("absent", timeout=0)
    client.set("present", b"1")
    assert client.get("present", timeout=0) == b"1"


def test_add_starts_at_zero_and_returns_new_value(client):
    assert client.add("counter", 5) == 5
    assert client.add("counter", -7) == -2
    assert client.get("counter") == b"-2"


def test_concurrent_adds_from_threads_are_atomic(client):
    threads, adds_per_thread = 8, 40
    results = []
    lock = threading.Lock()

    def add_many():
        for _ in range(adds_per_thread):
            value = client.add("shared", 1)
            with lock:
                results.append(value)

    workers = [threading.Thread(target=add_many) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    total = threads * adds_per_thread
    assert client.get("shared") == str(total).encode()
    # Each add saw a distinct value: no two adds were merged.
    assert sorted(results) == list(range(1, total + 1))


def test_add_to_non_integer_value_fails(client):
    client.set("text", b"not a number")
    with pytest.raises(RendezvousError, match="not an integer"):
        client.add("text", 1)


def test_delete_removes_key_and_is_idempotent(client):
    client.set("gone", b"1")
    client.delete("gone")
    client.delete("gone")
    with pytest.raises(RendezvousTimeoutError):
        client.get("gone", timeout=0)


def test_get_wakes_every_waiter(client):
    values = []
    readers = [threading.Thread(target=lambda: values.append(client.get("broadcast", timeout=10)))
               for _ in range(4)]
    for r in readers:
        r.start()
    time.sleep(0.2)
    client.set("broadcast", b"go")
    for r in readers:
        r.join()
    assert values == [b"go"] * 4


def test_server_reports_port_and_restarts_cleanly(secret):
    srv = RendezvousServer(secret, host="127.0.0.1")
    port = srv.start()
    assert port == srv.port and port > 0
    srv.stop()
    srv.stop()  # idempotent
    with pytest.raises(RendezvousError, match="cannot reach"):
        RendezvousClient("127.0.0.1", port, secret, timeout=0.5).set("k", b"v")


def test_server_requires_a_secret():
    with pytest.raises(ValueError):
        RendezvousServer("")


# -- authentication ------------------------------------------------------------

def test_accepted_response_is_signed_and_bound_to_the_request_nonce(server, secret):
    status, body, headers, nonce = _send_signed(server.port, secret, "PUT", "/v1/kv/a", b"v")
    assert status == 204
    canonical = b"\n".join([b"hvd-rendezvous-v1-response", b"204", nonce.encode(),
                            hashlib.sha256(body).hexdigest().encode()])
    assert headers["X-Hvd-Signature"] == hmac.new(secret.encode(), canonical,
                                                  hashlib.sha256).hexdigest()
    assert server.rejected_requests == 0


def test_unsigned_request_is_rejected_and_not_applied(server, client):
    status, _, _, _ = _send_signed(server.port, None, "PUT", "/v1/kv/target", b"forged", sign=False)
    assert status == 401
    assert server.rejected_requests == 1
    with pytest.raises(RendezvousTimeoutError):
        client.get("target", timeout=0)


def test_request_signed_with_wrong_secret_is_rejected_and_not_applied(server, client):
    status, _, _, _ = _send_signed(server.port, make_secret(), "PUT", "/v1/kv/target", b"forged")
    assert status == 401
    status, _, _, _ = _send_signed(server.port, make_secret(), "POST", "/v1/add/n", b"100")
    assert status == 401
    assert server.rejected_requests == 2
    with pytest.raises(RendezvousTimeoutError):
        client.get("target", timeout=0)
    assert client.add("n", 1) == 1


def test_replayed_request_is_rejected_and_not_applied(server, secret, client):
    nonce = secrets.token_hex(16)
    timestamp = int(time.time())
    status, _, _, _ = _send_signed(server.port, secret, "PUT", "/v1/kv/k", b"first",
                                   timestamp=timestamp, nonce=nonce)
    assert status == 204
    client.set("k", b"second")
    status, _, _, _ = _send_signed(server.port, secret, "PUT", "/v1/kv/k", b"first",
                                   timestamp=timestamp, nonce=nonce)
    assert status == 401
    assert server.rejected_requests == 1
    assert client.get("k") == b"second"


def test_replayed_add_is_not_counted_twice(server, secret, client):
    nonce = secrets.token_hex(16)
    timestamp = int(time.time())
    for expected_status in (200, 401):
        status, _, _, _ = _send_signed(server.port, secret, "POST", "/v1/add/n", b"5",
                                       timestamp=timestamp, nonce=nonce)
        assert status == expected_status
    assert client.get("n") == b"5"


def test_tampered_body_is_rejected_and_not_applied(server, secret, client):
    status, _, _, _ = _send_signed(server.port, secret, "PUT", "/v1/kv/k", b"tampered",
                                   signed_body=b"original")
    assert status == 401
    assert server.rejected_requests == 1
    with pytest.raises(RendezvousTimeoutError):
        client.get("k", timeout=0)


def test_tampered_key_is_rejected_and_not_applied(server, secret, client):
    status, _, _, _ = _send_signed(server.port, secret, "PUT", "/v1/kv/other", b"v",
                                   signed_target="/v1/kv/k")
    assert status == 401
    with pytest.raises(RendezvousTimeoutError):
        client.get("other", timeout=0)


def test_signed_request_with_an_unparsable_target_gets_a_signed_400(server, secret, client):
    # Found by tests/fuzz/fuzz_rendezvous.py: urlsplit raised ValueError on
    # this target and the handler thread died without answering.
    # (http.client refuses to send this target, so the request goes out raw.)
    target, timestamp, nonce, digest = "http://[::1/v1/kv/k", int(time.time()), secrets.token_hex(16), \
        hashlib.sha256(b"v").hexdigest()
    canonical = b"\n".join([b"hvd-rendezvous-v1", b"PUT", target.encode(), str(timestamp).encode(),
                            nonce.encode(), digest.encode()])
    signature = hmac.new(secret.encode(), canonical, hashlib.sha256).hexdigest()
    request = ("PUT %s HTTP/1.1\r\nContent-Length: 1\r\nConnection: close\r\nX-Hvd-Timestamp: %d\r\n"
               "X-Hvd-Nonce: %s\r\nX-Hvd-Content-SHA256: %s\r\nX-Hvd-Signature: %s\r\n\r\nv"
               % (target, timestamp, nonce, digest, signature)).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(request)
        answer = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ") and b"malformed request target" in answer
    assert b"X-Hvd-Signature: " in answer
    with pytest.raises(RendezvousTimeoutError):
        client.get("k", timeout=0)


@pytest.mark.parametrize("skew", [-400, 400])
def test_stale_or_future_request_is_rejected(server, secret, client, skew):
    status, body, _, _ = _send_signed(server.port, secret, "PUT", "/v1/kv/k", b"v",
                                      timestamp=int(time.time()) + skew)
    assert status == 401 and b"stale" in body
    with pytest.raises(RendezvousTimeoutError):
        client.get("k", timeout=0)


@pytest.mark.parametrize("nonce", ["short", "has space in it!", "x" * 200])
def test_malformed_nonce_is_rejected(server, secret, nonce):
    status, _, _, _ = _send_signed(server.port, secret, "PUT", "/v1/kv/k", b"v", nonce=nonce)
    assert status == 401


def test_rejection_is_logged_with_client_address(server, caplog):
    with caplog.at_level(logging.WARNING, logger="horovod.rendezvous"):
        _send_signed(server.port, None, "PUT", "/v1/kv/k", b"v", sign=False)
    messages = [r.getMessage() for r in caplog.records if r.name == "horovod.rendezvous"]
    assert any("127.0.0.1" in m and "unsigned" in m for m in messages), messages


# -- hostile clients -------------------------------------------------------------

def _raw_connection(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)
    return sock


def _read_until_closed(sock):
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_unauthenticated_body_is_refused_before_it_is_read(server):
    # Headers announcing the largest body the store takes, signed with a wrong
    # secret, and no body at all: the 401 must come back at once. A store that
    # read the body before checking the signature would wait for the 16 MiB.
    sock = _raw_connection(server.port)
    try:
        sock.sendall(b"PUT /v1/kv/k HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                     b"X-Hvd-Timestamp: %d\r\nX-Hvd-Nonce: %s\r\nX-Hvd-Signature: %s\r\n"
                     b"X-Hvd-Content-SHA256: %s\r\n\r\n"
                     % (rendezvous.MAX_BODY_BYTES, int(time.time()), secrets.token_hex(16).encode(),
                        b"0" * 64, hashlib.sha256(b"x").hexdigest().encode()))
        start = time.monotonic()
        answer = _read_until_closed(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert b"bad signature" in answer
    assert time.monotonic() - start < 3
    assert server.rejected_requests == 1


def test_request_without_the_body_digest_header_is_rejected(server, secret):
    # The signature alone no longer suffices: the store must know what the
    # signed digest is before it reads the body.
    timestamp, nonce = int(time.time()), secrets.token_hex(16)
    canonical = b"\n".join([b"hvd-rendezvous-v1", b"PUT", b"/v1/kv/k", str(timestamp).encode(), nonce.encode(),
                            hashlib.sha256(b"v").hexdigest().encode()])
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("PUT", "/v1/kv/k", body=b"v", headers={
            "X-Hvd-Timestamp": str(timestamp), "X-Hvd-Nonce": nonce,
            "X-Hvd-Signature": hmac.new(secret.encode(), canonical, hashlib.sha256).hexdigest()})
        response = conn.getresponse()
        assert response.status == 401 and b"missing signature headers" in response.read()
    finally:
        conn.close()


def test_a_client_that_stalls_mid_request_loses_its_connection(secret, monkeypatch):
    # Every read and write of a request has a deadline by default (without
    # one a silent client holds its thread for ever); shortened here to 1 s.
    assert 0 < rendezvous._SignedRequestHandler.timeout <= 30
    monkeypatch.setattr(rendezvous._SignedRequestHandler, "timeout", 1.0)
    with RendezvousServer(secret, host="127.0.0.1") as srv:
        for partial in (b"", b"GET /v1/kv/k HTTP/1.1\r\nHost: x\r\n"):
            sock = _raw_connection(srv.port)
            try:
                sock.sendall(partial)
                start = time.monotonic()
                _read_until_closed(sock)  # the store closes it: recv returns b""
                assert 0.5 < time.monotonic() - start < 5, partial
            finally:
                sock.close()


def test_silent_connections_beyond_the_cap_wait_instead_of_taking_threads(secret, monkeypatch):
    monkeypatch.setattr(rendezvous, "MAX_CONCURRENT_CONNECTIONS", 4)
    monkeypatch.setattr(rendezvous._SignedRequestHandler, "timeout", 1.5)
    with RendezvousServer(secret, host="127.0.0.1") as srv:
        threads_before = threading.active_count()
        silent = [_raw_connection(srv.port) for _ in range(12)]
        try:
            time.sleep(0.5)
            assert threading.active_count() - threads_before <= 4
            # A real client still gets through once the stalled ones time out.
            client = RendezvousClient("127.0.0.1", srv.port, secret, timeout=20)
            client.set("k", b"v")
            assert client.get("k") == b"v"
        finally:
            for sock in silent:
                sock.close()


def test_clients_that_drip_their_request_lose_their_connections_and_let_a_job_through(secret, monkeypatch):
    # A byte every 0.2 s never trips the per-read timeout; the deadline for
    # the whole request head (1 s here, 10 s by default) ends such clients.
    assert 0 < rendezvous.REQUEST_HEAD_SECONDS <= 30
    monkeypatch.setattr(rendezvous, "MAX_CONCURRENT_CONNECTIONS", 4)
    monkeypatch.setattr(rendezvous, "REQUEST_HEAD_SECONDS", 1.0)
    stop = threading.Event()
    closed_after = []

    def drip(port):
        sock = _raw_connection(port)
        sock.setblocking(False)
        start = time.monotonic()
        try:
            for byte in b"GET /v1/kv/k HTTP/1.1\r\nX-Pad: " + b"a" * 1000:
                if stop.wait(0.2):
                    return
                sock.send(bytes([byte]))
                try:
                    while sock.recv(4096):
                        pass  # whatever the store answers, it must then close
                except BlockingIOError:
                    continue  # still open
                break  # end of file: the store closed it
        except OSError:
            pass  # reset by the store
        finally:
            closed_after.append(time.monotonic() - start)
            sock.close()

    with RendezvousServer(secret, host="127.0.0.1") as srv:
        drippers = [threading.Thread(target=drip, args=(srv.port,)) for _ in range(6)]
        for t in drippers:
            t.start()
        try:
            time.sleep(0.5)  # every slot now taken by a dripping client
            start = time.monotonic()
            client = RendezvousClient("127.0.0.1", srv.port, secret, timeout=15)
            client.set("k", b"v")
            assert client.get("k") == b"v"
            assert time.monotonic() - start < 8
        finally:
            for t in drippers:
                t.join(timeout=10)
            stop.set()
    assert len(closed_after) == 6 and all(s < 8 for s in closed_after), closed_after


def test_other_methods_get_405_with_the_allowed_ones(server, secret):
    for method in ("PATCH", "HEAD", "OPTIONS"):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            conn.request(method, "/v1/kv/k", body=b"x" if method == "PATCH" else None)
            response = conn.getresponse()
            response.read()
            assert response.status == 405, method
            assert response.getheader("Allow") == "GET, PUT, POST, DELETE"
        finally:
            conn.close()


@pytest.mark.parametrize("wait", ["nan", "inf", "-inf", "soon"])
def test_signed_get_with_a_wait_that_is_not_a_finite_number_is_refused(server, secret, wait):
    start = time.monotonic()
    status, body, _, _ = _send_signed(server.port, secret, "GET", "/v1/kv/k?wait=" + wait)
    assert status == 400 and b"wait" in body
    assert time.monotonic() - start < 2


def test_a_flood_of_rejected_requests_is_counted_but_logged_in_summary(server, caplog):
    floods = rendezvous.REJECTIONS_LOGGED_INDIVIDUALLY + 30
    long_key = "/v1/kv/" + "\x1b[31m" * 2 + "k" * 5000
    with caplog.at_level(logging.WARNING, logger="horovod.rendezvous"):
        for _ in range(floods):
            _send_signed(server.port, None, "PUT", urllib.parse.quote(long_key, safe="/"), b"v", sign=False)
    assert server.rejected_requests == floods
    messages = [r.getMessage() for r in caplog.records if r.name == "horovod.rendezvous"]
    assert rendezvous.REJECTIONS_LOGGED_INDIVIDUALLY <= len(messages) <= rendezvous.REJECTIONS_LOGGED_INDIVIDUALLY + 1
    assert any("more request" in m for m in messages), messages[-1]
    assert all(len(m) < 400 for m in messages), max(messages, key=len)


def test_client_with_wrong_secret_raises_auth_error(server):
    bad = RendezvousClient("127.0.0.1", server.port, make_secret(), timeout=5)
    with pytest.raises(RendezvousAuthError, match="rejected"):
        bad.set("k", b"v")
    with pytest.raises(RendezvousAuthError):
        bad.get("k", timeout=1)
    assert server.rejected_requests == 2


class _UnsignedResponder(http.server.BaseHTTPRequestHandler):
    """A server that does not know the secret and answers everything with 200."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"fake")

    do_PUT = do_POST = do_GET

    def log_message(self, *args):
        pass


class _FloodingResponder(http.server.BaseHTTPRequestHandler):
    """A server that answers with a 64 MiB body, more than any store value."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(64 << 20))
        self.end_headers()
        chunk = b"\0" * (1 << 20)
        try:
            for _ in range(64):
                self.wfile.write(chunk)
        except OSError:  # the client hung up, as it should
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _UnsignedResponder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_client_detects_a_server_without_the_secret(fake_server, secret):
    fake = RendezvousClient("127.0.0.1", fake_server, secret, timeout=5)
    with pytest.raises(RendezvousAuthError, match="not signed"):
        fake.get("k", timeout=1)


# -- the engine's C++ client (src/rendezvous/http_store.cc) -------------------

@pytest.fixture(scope="session")
def cpp_client_binary(tmp_path_factory):
    """Builds tests/rendezvous_cpp once per test session."""
    cmake = shutil.which("cmake")
    if cmake is None or (shutil.which("c++") is None and shutil.which("g++") is None):
        pytest.skip("cmake and a C++ compiler are needed for the C++ client test")
    source = PACKAGE_ROOT / "tests" / "rendezvous_cpp"
    build = pathlib.Path(os.environ.get(
        "HVD_RENDEZVOUS_CPP_BUILD_DIR",
        str(tmp_path_factory.mktemp("rendezvous-cpp"))))
    for command in ([cmake, "-S", str(source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
                    [cmake, "--build", str(build), "-j2"]):
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, "%s failed:\n%s\n%s" % (command, result.stdout, result.stderr)
    return build / "http_store_client_test"


def _run_cpp(binary, port, secret, scenario):
    result = subprocess.run([str(binary), "127.0.0.1", str(port), secret, scenario],
                            capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "FAIL" not in result.stdout, output
    return output


def test_cpp_client_roundtrip_against_python_server(cpp_client_binary, server, client, secret):
    client.set("py/from-python", b"hello from python")
    output = _run_cpp(cpp_client_binary, server.port, secret, "roundtrip")
    assert "PASS concurrent_adds_are_atomic" in output
    assert "PASS get_waits_for_a_later_set" in output
    assert client.get("cpp/from-cpp") == b"hello from c++"
    assert client.get("cpp/concurrent") == b"100"
    assert server.rejected_requests == 0


def test_cpp_client_with_wrong_secret_is_rejected(cpp_client_binary, server, client):
    _run_cpp(cpp_client_binary, server.port, make_secret(), "wrong-secret")
    assert server.rejected_requests == 3
    with pytest.raises(RendezvousTimeoutError):
        client.get("cpp/forged", timeout=0)
    with pytest.raises(RendezvousTimeoutError):
        client.get("cpp/forged-counter", timeout=0)


def test_cpp_client_reports_unreachable_store(cpp_client_binary, secret):
    srv = RendezvousServer(secret, host="127.0.0.1")
    port = srv.start()
    srv.stop()
    _run_cpp(cpp_client_binary, port, secret, "unreachable")


def test_cpp_client_detects_a_server_without_the_secret(cpp_client_binary, fake_server, secret):
    _run_cpp(cpp_client_binary, fake_server, secret, "unsigned-server")


def test_cpp_client_stops_reading_a_response_larger_than_any_store_answer(cpp_client_binary, secret):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FloodingResponder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        _run_cpp(cpp_client_binary, httpd.server_address[1], secret, "oversized-response")
    finally:
        httpd.shutdown()
        httpd.server_close()
