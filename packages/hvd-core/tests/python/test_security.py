# test_security.py - every peer connection and store request must prove the
# job secret: a rogue client is rejected and logged, and cannot disturb the
# job. What the ranks run is in rank_programs/security.py.
import logging

import ranks


def _rejections(stderr):
    """The engine's "rejected connection from ADDR: REASON" warnings, as (port, reason) in log order."""
    found = []
    for line in stderr.splitlines():
        if "WARNING: rejected connection from " in line:
            address, reason = line.split("rejected connection from ", 1)[1].split(": ", 1)
            found.append((int(address.rsplit(":", 1)[1]), reason))
    return found


def test_rogue_connections_are_rejected_and_the_job_continues(caplog):
    caplog.set_level(logging.WARNING, logger="horovod.rendezvous")
    results = ranks.run_program(2, "security:rogue_clients_at_rank_1", timeout=60)
    for res in results:
        assert res.returncode == 0, str(res)
    out0 = results[0].last_json()
    # The store refuses the write for its signature, says so, and logs it.
    assert out0["store_write"].startswith("the rendezvous store 127.0.0.1:"), out0
    assert "rejected set '" in out0["store_write"] and "/g0/peer/1'" in out0["store_write"], out0
    assert "bad signature (wrong secret or request altered)" in out0["store_write"], out0
    assert any("rejected PUT" in r.getMessage() and "bad signature" in r.getMessage() for r in caplog.records), \
        caplog.text
    assert out0["peer_entry_intact"], out0
    for res in results:
        assert res.last_json()["after"] == [2.0, 2.0, 2.0], str(res)
    # Rank 1 rejects the garbage as not a handshake, while the silent client's
    # handshake is still pending: a client that says nothing does not block
    # the listener (its own rejection comes only when it hangs up).
    rejections = _rejections(results[1].stderr)
    ports = [port for port, _ in rejections]
    assert (out0["garbage_port"], "not an hvd handshake (bad magic)") in rejections, results[1].stderr
    assert out0["silent_port"] not in ports or \
        ports.index(out0["garbage_port"]) < ports.index(out0["silent_port"]), results[1].stderr


def test_rank_with_the_wrong_secret_cannot_join():
    results = ranks.run_program(2, "security:init_and_say_how_it_went", env={"HOROVOD_GLOO_TIMEOUT_SECONDS": "3"},
                                rank_env_overrides={1: {"HOROVOD_SECRET_KEY": "f" * 64}}, timeout=60)
    outcome0, outcome1 = (res.last_json() for res in results)
    # Rank 1's first store request is refused for its signature ...
    assert outcome1.startswith("failed: HorovodInternalError rendezvous store 127.0.0.1:"), outcome1
    assert "rejected set '" in outcome1 and "bad signature (wrong secret or request altered)" in outcome1, outcome1
    # ... so its address never reaches rank 0, which gives up after the timeout, naming it.
    assert outcome0.startswith("failed: HorovodInternalError rendezvous: key '"), outcome0
    assert "/g0/peer/1' did not appear" in outcome0 and "within 3.000 s" in outcome0, outcome0
