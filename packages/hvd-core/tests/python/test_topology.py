# test_topology.py - the transports behind the same API: shared memory on one
# host, TCP only (HOROVOD_SHM_DISABLE=1), and hierarchical shared memory +
# TCP across "hosts" (distinct HOROVOD_HOSTNAMEs on this machine). What the
# ranks run is in rank_programs/topology.py.
import os
import re

import pytest

import ranks


def _run(tmp_path, np_, expected_transport, env=None, **kwargs):
    # Rank 0's timeline names each activity after the transport that ran it
    # (TCP_ALLREDUCE, SHM_ALLREDUCE, ...): proof of which one the job used.
    timeline = tmp_path / "timeline.json"
    results = ranks.run_program_ok(np_, "topology:every_collective_small_to_large",
                                   env=dict(env or {}, HOROVOD_TIMELINE=str(timeline)), timeout=120, **kwargs)
    activities = set(re.findall(r'"([A-Z]+)_ALLREDUCE"', timeline.read_text())) - {"NEGOTIATE"}
    assert activities == {expected_transport}, activities
    return results


def _check(results, expected_topology):
    for rank, res in enumerate(results):
        assert res["topology"] == expected_topology[rank], (rank, res["topology"])
        bad = [k for k, v in res["ok"].items() if not v]
        assert bad == [], "rank %d wrong: %s" % (rank, bad)


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_ranks_on_one_host_use_shared_memory(tmp_path, np_):
    _check(_run(tmp_path, np_, "SHM"), [[r, np_, 0, 1, True] for r in range(np_)])


@pytest.mark.parametrize("np_", [2, 3])
def test_ranks_use_tcp_only_when_shared_memory_is_disabled(tmp_path, np_):
    _check(_run(tmp_path, np_, "TCP", env={"HOROVOD_SHM_DISABLE": "1"}),
           [[r, np_, 0, 1, True] for r in range(np_)])


def test_two_hosts_with_two_ranks_each_run_hierarchical_collectives(tmp_path):
    hosts = ["hostA", "hostA", "hostB", "hostB"]
    _check(_run(tmp_path, 4, "HIERARCHICAL", hosts=hosts),
           [[0, 2, 0, 2, True], [1, 2, 0, 2, True], [0, 2, 1, 2, True], [1, 2, 1, 2, True]])


def test_hosts_with_different_rank_counts_use_flat_tcp(tmp_path):
    # Hierarchical collectives need the same number of ranks on every host.
    hosts = ["hostA", "hostA", "hostB"]
    _check(_run(tmp_path, 3, "TCP", hosts=hosts),
           [[0, 2, 0, 2, False], [1, 2, 0, 1, False], [0, 1, 1, 2, False]])


def test_interface_list_uses_the_first_name_each_host_has():
    # HOROVOD_GLOO_IFACE is a list because hosts may name their NICs
    # differently; this host has only the second name.
    results = ranks.run_program_ok(2, "topology:allreduce_over_the_first_interface_in_the_list",
                                   hosts=["hostA", "hostB"], env={"HOROVOD_GLOO_IFACE": "nosuchif0, lo"})
    assert results == [[2.0, 2.0]] * 2


def test_an_interface_list_this_host_has_none_of_is_a_clear_error():
    results = ranks.run_program(2, "topology:init_with_no_usable_interface",
                                env={"HOROVOD_GLOO_IFACE": "nosuchif0,nosuchif1"}, timeout=30)
    for res in results:
        error = res.last_json()
        assert "none of the network interfaces 'nosuchif0,nosuchif1'" in error, error
        assert "HOROVOD_GLOO_IFACE" in error, error
        assert "lo" in error.split("interfaces with one: ", 1)[1].rstrip(")").split(", "), error


def _waits_line(result):
    lines = [line for line in result.stderr.splitlines() if "initialized: rank" in line]
    assert len(lines) == 1, str(result)
    return lines[0].split("; ", 1)[1]


@pytest.mark.parametrize("spin_wait, expected", [
    (None, "waits yield (auto: 2 rank(s) of this job on this machine, 1 usable CPU(s))"),
    ("1", "waits busy-poll (HOROVOD_SPIN_WAIT: 2 rank(s) of this job on this machine, 1 usable CPU(s))"),
])
def test_ranks_sharing_a_machine_under_different_host_names_count_as_sharing_its_cpus(spin_wait, expected):
    # Two "hosts" (as network namespaces or containers on one machine are),
    # both pinned to one CPU: polling would take the CPU from the rank being
    # waited for, so waits yield it - unless HOROVOD_SPIN_WAIT forces polling.
    env = {"HOROVOD_LOG_LEVEL": "info"}
    if spin_wait is not None:
        env["HOROVOD_SPIN_WAIT"] = spin_wait
    results = ranks.run_program(2, "topology:allreduce_on_cpus", kwargs={"cpus": [0]}, hosts=["hostA", "hostB"],
                                env=env, timeout=60)
    for res in results:
        assert res.returncode == 0, str(res)
        assert res.last_json() == {"sum": [2.0, 2.0, 2.0]}
        assert _waits_line(res) == expected


def test_ranks_with_a_cpu_each_busy_poll():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs, this process may use %d" % len(cpus))
    results = ranks.run_program(2, "topology:allreduce_on_cpus", kwargs={"cpus": cpus[:2]},
                                env={"HOROVOD_LOG_LEVEL": "info"}, timeout=60)
    for res in results:
        assert res.returncode == 0, str(res)
        waits = _waits_line(res)
        if waits.endswith(", 1 usable CPU(s))"):
            pytest.skip("this machine's CPU quota leaves one CPU: " + waits)
        assert waits == "waits busy-poll (auto: 2 rank(s) of this job on this machine, 2 usable CPU(s))"


def test_an_unknown_spin_wait_value_is_refused_naming_the_variable():
    results = ranks.run_program_ok(2, "topology:allreduce_on_cpus", env={"HOROVOD_SPIN_WAIT": "sometimes"})
    for res in results:
        assert "HOROVOD_SPIN_WAIT=sometimes is not supported" in res["error"], res
