# test_security.py - every peer connection and store request must prove the
# job secret: a rogue client is rejected and logged, and cannot disturb the job.
import ranks


def test_rogue_connections_are_rejected_and_the_job_continues():
    results = ranks.run(2, '''
import hashlib, socket
from horovod.common.rendezvous import RendezvousClient
hvd.init()
rank = hvd.rank()
out = {}
if rank == 0:
    secret = os.environ["HOROVOD_SECRET_KEY"]
    prefix = hashlib.sha256(secret.encode()).hexdigest()[:16] + "/g0/"
    client = RendezvousClient(os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
                              int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]), secret)
    host, addr = client.get(prefix + "peer/1").decode().split("\\n")[:2]
    ip, port = addr.rsplit(":", 1)
    # 1. garbage
    s = socket.create_connection((ip, int(port)), timeout=5)
    s.sendall(os.urandom(512))
    time.sleep(0.3)
    s.close()
    # 2. a client that connects and says nothing
    silent = socket.create_connection((ip, int(port)), timeout=5)
    # 3. the store without the secret
    wrong = RendezvousClient(os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
                             int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]), "not-the-secret", timeout=3)
    try:
        wrong.set(prefix + "peer/1", b"evil")
        out["store_write"] = "accepted"
    except Exception as e:
        out["store_write"] = type(e).__name__
    out["peer_entry_intact"] = client.get(prefix + "peer/1").decode().split("\\n")[1] == addr
time.sleep(1.0)
# The job goes on while the silent client still holds its connection open.
out["after"] = hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum).tolist()
print(json.dumps(out))
''', timeout=60)
    import json
    for res in results:
        assert res.returncode == 0, str(res)
    out0 = json.loads(results[0].stdout.strip().splitlines()[-1])
    assert out0["store_write"] == "RendezvousAuthError", out0  # refused for the signature, nothing else
    assert out0["peer_entry_intact"], out0
    assert out0["after"] == [2.0, 2.0, 2.0]
    assert "reject" in results[1].stderr.lower(), str(results[1])


def test_rank_with_the_wrong_secret_cannot_join():
    results = ranks.run(2, '''
try:
    hvd.init()
    print("joined")
except Exception as e:
    print("failed:", type(e).__name__, e)
''', env={"HOROVOD_GLOO_TIMEOUT_SECONDS": "3"}, rank_env_overrides={1: {"HOROVOD_SECRET_KEY": "f" * 64}},
        timeout=60)
    assert "failed:" in results[1].stdout, str(results[1])
    assert "failed:" in results[0].stdout, str(results[0])
    assert "peer/1" in results[0].stdout or "rank 1" in results[0].stdout, str(results[0])
