# test_data_protection.py - HOROVOD_DATA_AUTH / HOROVOD_DATA_ENCRYPT on real
# ranks over TCP: a byte changed on the way between two ranks fails the job
# on both ranks, naming the rank the data came from, while without the knob
# the same change goes unnoticed; collectives give the same results with and
# without the knobs; ranks that disagree on them fail init naming the knob.
# What the ranks run is in rank_programs/data_protection.py.
import pytest

import ranks

TCP = {"HOROVOD_SHM_DISABLE": "1", "HOROVOD_PEER_TIMEOUT_SECONDS": "10"}
# A byte of the first 4 MiB the data link of rank 1 sends rank 0: past the
# handshake and every control message, inside the allreduce's data.
FLIP_AT = 300001


# (size, dialer, acceptor, toward_acceptor, detecting rank, sender): in the
# TCP ring rank r sends to rank r + 1, so the changed byte reaches one rank.
TAMPERED_LINKS = {
    # rank 1 -> rank 0, the coordinator finds it
    "coordinator finds it": (2, 1, 0, True, 0, 1),
    # rank 1 -> rank 2 (rank 2 dials rank 1): a worker finds it, the
    # coordinator relays its reason to the third rank
    "a worker finds it": (3, 2, 1, False, 2, 1),
}


@pytest.mark.parametrize("link", sorted(TAMPERED_LINKS))
@pytest.mark.parametrize("knob", ["HOROVOD_DATA_AUTH", "HOROVOD_DATA_ENCRYPT"])
def test_a_byte_changed_between_ranks_fails_the_job_on_every_rank_naming_the_sender(knob, link):
    size, dialer, acceptor, toward_acceptor, finder, sender = TAMPERED_LINKS[link]
    results = ranks.run_program(size, "data_protection:allreduce_through_tampering_proxy", timeout=90,
                                kwargs={"flip_at": FLIP_AT, "dialer": dialer, "acceptor": acceptor,
                                        "toward_acceptor": toward_acceptor},
                                env=dict(TCP, **{knob: "1"}))
    outcomes = [res.last_json()["outcome"] for res in results]
    found = "on member %d (global rank %d): data from member %d (global rank %d) failed authentication" % (
        finder, finder, sender, sender)
    # Every rank reports the cause (the others learn it from the finder's
    # abort, relayed by the coordinator), not the connection the finder
    # closed, and not by waiting out a timeout.
    for rank, outcome in enumerate(outcomes):
        assert outcome.startswith("failed: HorovodInternalError"), results[rank]
        assert found in outcome, (rank, outcomes)


def test_without_the_knob_the_same_change_goes_unnoticed():
    # The proxy really does change the data: unprotected, the sum is wrong and nobody knows.
    reports = ranks.run_program_ok(2, "data_protection:allreduce_through_tampering_proxy", timeout=90,
                                   kwargs={"flip_at": FLIP_AT}, env=TCP)
    assert reports[0] == {"outcome": "completed", "correct": False}, reports
    # Nothing changed (the byte lies past the end): the proxy alone is harmless.
    reports = ranks.run_program_ok(2, "data_protection:allreduce_through_tampering_proxy", timeout=90,
                                   kwargs={"flip_at": 1 << 40}, env=dict(TCP, HOROVOD_DATA_AUTH="1"))
    assert reports == [{"outcome": "completed", "correct": True}] * 2, reports


@pytest.mark.parametrize("size", [2, 3])
def test_collectives_give_the_same_results_with_the_knobs(size):
    plain = ranks.run_program_ok(size, "data_protection:collectives_digest", timeout=120, env=TCP)
    for knob in ("HOROVOD_DATA_AUTH", "HOROVOD_DATA_ENCRYPT"):
        protected = ranks.run_program_ok(size, "data_protection:collectives_digest", timeout=120,
                                         env=dict(TCP, **{knob: "1"}))
        assert protected == plain, (knob, protected, plain)


@pytest.mark.parametrize("knob, everywhere", [("HOROVOD_DATA_AUTH", {}), ("HOROVOD_DATA_ENCRYPT", {}),
                                               ("HOROVOD_DATA_ENCRYPT", {"HOROVOD_DATA_AUTH": "1"})])
def test_ranks_that_disagree_on_the_knob_fail_init_naming_it(knob, everywhere):
    reports = ranks.run_program_ok(2, "bad_input:init_error", timeout=60, env=everywhere,
                                   rank_env_overrides={1: {knob: "1"}})
    for report in reports:
        assert report[0] == "ValueError", report
        assert report[1].startswith(knob + " must be the same on every rank: rank 0 "), report
        assert "has 0, rank 1 " in report[1] and report[1].endswith("has 1"), report
