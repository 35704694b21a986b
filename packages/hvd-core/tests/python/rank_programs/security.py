# security.py - rank side of test_security.py: rogue clients against a
# rank's peer listener and the job's store, and a rank that holds the wrong
# job secret.
"""Rank programs for test_security.py."""

import hashlib
import os
import socket
import time

import numpy as np

import horovod.common as hvd
from horovod.common.rendezvous import RendezvousAuthError, RendezvousClient


def rogue_clients_at_rank_1():
    """Rank 0 plays the intruder against rank 1's listener and the store; then both ranks allreduce."""
    hvd.init()
    out = {}
    silent = None
    if hvd.rank() == 0:
        secret = os.environ["HOROVOD_SECRET_KEY"]
        store = (os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"], int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]))
        prefix = hashlib.sha256(secret.encode()).hexdigest()[:16] + "/g0/"
        client = RendezvousClient(store[0], store[1], secret)
        addr = client.get(prefix + "peer/1").decode().split("\n")[1]
        ip, port = addr.rsplit(":", 1)
        # A client that connects and says nothing, left pending ...
        silent = socket.create_connection((ip, int(port)), timeout=5)
        # ... while another sends garbage: the listener must still take (and
        # reject) new connections.
        garbage = socket.create_connection((ip, int(port)), timeout=5)
        out["silent_port"] = silent.getsockname()[1]
        out["garbage_port"] = garbage.getsockname()[1]
        garbage.sendall(os.urandom(512))
        time.sleep(0.3)
        garbage.close()
        # The store, by a client without the secret. Any error other than the
        # store refusing the signature propagates and fails the rank.
        wrong = RendezvousClient(store[0], store[1], "not-the-secret", timeout=3)
        try:
            wrong.set(prefix + "peer/1", b"evil")
            out["store_write"] = "accepted"
        except RendezvousAuthError as e:
            out["store_write"] = str(e)
        out["peer_entry_intact"] = client.get(prefix + "peer/1").decode().split("\n")[1:2] == [addr]
    time.sleep(1.0)
    # The job goes on while the silent client still holds its connection open.
    out["after"] = hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum).tolist()
    if silent is not None:
        silent.close()
    return out


def init_and_say_how_it_went():
    try:
        hvd.init()
        return "joined"
    except Exception as e:
        return "failed: %s %s" % (type(e).__name__, e)
