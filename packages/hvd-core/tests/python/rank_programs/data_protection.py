# data_protection.py - rank side of test_data_protection.py: a job whose
# rank 1 reaches rank 0 through a proxy that changes one byte on the way
# (a man in the middle), and plain collectives under the knobs.
"""Rank programs for test_data_protection.py."""

import hashlib
import os
import socket
import threading

import numpy as np

import horovod.common as hvd
from horovod.common.rendezvous import RendezvousClient

# Elements of the tampered allreduce: 4 MiB of float32 go through the TCP
# ring, far past the handshake and the control messages of any link.
TAMPERED_ELEMENTS = 1 << 20


def _pump(source, sink, flip_at):
    """Copies source to sink until either closes; XORs 0x01 into the byte at offset flip_at (None: none)."""
    offset = 0
    try:
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            if flip_at is not None and offset <= flip_at < offset + len(chunk):
                chunk = bytearray(chunk)
                chunk[flip_at - offset] ^= 0x01
                chunk = bytes(chunk)
            offset += len(chunk)
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _start_proxy(target, flip_at, toward_target=True):
    """A TCP proxy to target ("ip:port") that changes byte flip_at of each stream one way; returns its port.

    The stream changed is what the client sends (toward_target) or what the target answers.
    """
    host, port = target.rsplit(":", 1)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def accept_loop():
        while True:
            client, _ = listener.accept()
            upstream = socket.create_connection((host, int(port)))
            flips = (flip_at, None) if toward_target else (None, flip_at)
            for args in ((client, upstream, flips[0]), (upstream, client, flips[1])):
                threading.Thread(target=_pump, args=args, daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    return listener.getsockname()[1]


def allreduce_through_tampering_proxy(flip_at, dialer=1, acceptor=0, toward_acceptor=True):
    """Rank `dialer` reaches rank `acceptor` (a lower rank) through a proxy that flips one bit at flip_at.

    The bit is in each stream from dialer to acceptor (toward_acceptor), or
    from acceptor to dialer. In the TCP ring rank r sends to rank r + 1.
    """
    if int(os.environ["HOROVOD_RANK"]) == dialer:
        # Before init: point this rank at the proxy instead of the acceptor's
        # listener, as an attacker on the path would (only the store entry
        # changes; the acceptor and its secret are untouched). Every rank
        # above the acceptor dials it this way: the tests pick a pair where
        # the dialer is the only one.
        secret = os.environ["HOROVOD_SECRET_KEY"]
        client = RendezvousClient(os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
                                  int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]), secret)
        key = hashlib.sha256(secret.encode()).hexdigest()[:16] + "/g0/peer/%d" % acceptor
        lines = client.get(key, timeout=30).decode().split("\n")
        lines[1] = "127.0.0.1:%d" % _start_proxy(lines[1], flip_at, toward_acceptor)
        client.set(key, "\n".join(lines).encode())
    hvd.init()
    x = np.arange(TAMPERED_ELEMENTS, dtype=np.float32) * (hvd.rank() + 1)
    try:
        y = hvd.allreduce(x, op=hvd.Sum, name="tampered")
    except Exception as e:  # noqa: BLE001 - the outcome is what the test checks
        return {"outcome": "failed: %s: %s" % (type(e).__name__, e)}
    expected = np.arange(TAMPERED_ELEMENTS, dtype=np.float32) * sum(range(1, hvd.size() + 1))
    return {"outcome": "completed", "correct": bool(np.array_equal(y, expected))}


def collectives_digest():
    """Every CPU collective on a few sizes; returns the results, rounded, for comparison across settings."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    out = {}
    for count in (1, 1000, 100000):
        x = (np.arange(count, dtype=np.float32) % 97) * (r + 1)
        out["allreduce_%d" % count] = float(hvd.allreduce(x, op=hvd.Sum, name="ar%d" % count).sum())
        g = hvd.allgather(np.full(count + r, r, dtype=np.int32), name="ag%d" % count)
        out["allgather_%d" % count] = [int(g.shape[0]), int(g.sum())]
        b = hvd.broadcast(np.arange(count, dtype=np.float64) + r, root_rank=n - 1, name="bc%d" % count)
        out["broadcast_%d" % count] = float(b.sum())
        a = hvd.alltoall(np.full(count * n, r, dtype=np.float32), name="a2a%d" % count)
        out["alltoall_%d" % count] = float(a.sum())
    out["object"] = hvd.broadcast_object({"from": r, "list": list(range(5))}, root_rank=0)
    out["objects"] = hvd.allgather_object(r * 10)
    return out
