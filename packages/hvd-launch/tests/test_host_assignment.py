"""Host list parsing and rank placement, as pure functions."""

import pytest

from horovod.runner.errors import BadInputError
from horovod.runner.hosts import HostSlots, assign_slots, parse_hostfile, parse_hosts


def test_parse_hosts_reads_slots_and_defaults_to_one():
    assert parse_hosts("a:2,b,c:4") == [HostSlots("a", 2), HostSlots("b", 1), HostSlots("c", 4)]


def test_parse_hosts_accepts_bracketed_ipv6():
    assert parse_hosts("[fe80::1]:2,127.0.0.2:1") == [HostSlots("fe80::1", 2), HostSlots("127.0.0.2", 1)]


@pytest.mark.parametrize("value", ["", "a:2,,b:2", "a:x", "a:0", "a:-1", "a:2:3", "a b:2", "a:2,a:1"])
def test_parse_hosts_rejects_malformed_lists(value):
    with pytest.raises(BadInputError):
        parse_hosts(value)


def test_parse_hostfile_reads_slots_comments_and_blank_lines(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# cluster\nserver1 slots=4\n\nserver2 slots=2  # smaller\nserver3:3\nserver4\n")
    assert parse_hostfile(str(path)) == [HostSlots("server1", 4), HostSlots("server2", 2),
                                         HostSlots("server3", 3), HostSlots("server4", 1)]


@pytest.mark.parametrize("text", ["server1 slots=x\n", "server1 slots=0\n", "server1 cpus=2\n",
                                  "server1 slots=2 extra\n", "# nothing\n\n", "bad/host slots=2\n"])
def test_parse_hostfile_rejects_malformed_files_naming_the_line(tmp_path, text):
    path = tmp_path / "hosts"
    path.write_text(text)
    with pytest.raises(BadInputError, match="host file"):
        parse_hostfile(str(path))


def test_parse_hostfile_reports_missing_file(tmp_path):
    with pytest.raises(BadInputError, match="cannot read host file"):
        parse_hostfile(str(tmp_path / "absent"))


def _table(slots):
    return [(s.hostname, s.rank, s.local_rank, s.local_size, s.cross_rank, s.cross_size, s.size)
            for s in slots]


def test_single_host_gets_consecutive_local_ranks():
    assert _table(assign_slots([HostSlots("localhost", 4)], 3)) == [
        ("localhost", 0, 0, 3, 0, 1, 3),
        ("localhost", 1, 1, 3, 0, 1, 3),
        ("localhost", 2, 2, 3, 0, 1, 3),
    ]


def test_two_equal_hosts_are_filled_in_order():
    assert _table(assign_slots(parse_hosts("a:2,b:2"), 4)) == [
        ("a", 0, 0, 2, 0, 2, 4),
        ("a", 1, 1, 2, 0, 2, 4),
        ("b", 2, 0, 2, 1, 2, 4),
        ("b", 3, 1, 2, 1, 2, 4),
    ]


def test_uneven_hosts_have_cross_sizes_per_local_rank():
    # Local rank 2 exists only on host a, local rank 1 on a and c.
    assert _table(assign_slots(parse_hosts("a:3,b:1,c:2"), 6)) == [
        ("a", 0, 0, 3, 0, 3, 6),
        ("a", 1, 1, 3, 0, 2, 6),
        ("a", 2, 2, 3, 0, 1, 6),
        ("b", 3, 0, 1, 1, 3, 6),
        ("c", 4, 0, 2, 2, 3, 6),
        ("c", 5, 1, 2, 1, 2, 6),
    ]


def test_fewer_ranks_than_slots_leave_later_hosts_unused():
    slots = assign_slots(parse_hosts("a:2,b:2,c:2"), 3)
    assert _table(slots) == [
        ("a", 0, 0, 2, 0, 2, 3),
        ("a", 1, 1, 2, 0, 1, 3),
        ("b", 2, 0, 1, 1, 2, 3),
    ]


def test_to_env_gives_the_worker_contract():
    slot = assign_slots(parse_hosts("a:1,b:1"), 2)[1]
    assert slot.to_env() == {
        "HOROVOD_HOSTNAME": "b", "HOROVOD_RANK": "1", "HOROVOD_SIZE": "2",
        "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "1",
        "HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2",
    }


def test_more_ranks_than_slots_is_an_error_naming_both():
    with pytest.raises(BadInputError, match=r"-np 5 is larger than the 4 slot\(s\)"):
        assign_slots(parse_hosts("a:2,b:2"), 5)


def test_zero_ranks_is_an_error():
    with pytest.raises(BadInputError):
        assign_slots(parse_hosts("a:2"), 0)
