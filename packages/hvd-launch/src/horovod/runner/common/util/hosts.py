# hosts.py - Horovod's horovod.runner.common.util.hosts names over hvd's host
# parsing and rank placement (horovod.runner.hosts).
"""Host lists and slot assignment, under Horovod's names."""

from typing import List, Optional, Sequence, Tuple, Dict

from horovod.runner.hosts import HostSlots, SlotInfo, assign_slots, format_hosts, parse_hostfile
from horovod.runner.hosts import parse_hosts as _parse_hosts

__all__ = ["HostInfo", "SlotInfo", "INVALID_SLOT_INFO", "parse_hosts", "parse_host_files", "parse_hosts_and_slots",
           "get_host_assignments"]

HostInfo = HostSlots

INVALID_SLOT_INFO = SlotInfo(hostname="", rank=-1, local_rank=-1, cross_rank=-1, size=-1, local_size=-1,
                             cross_size=-1)


def parse_hosts(hosts_string: str) -> List[HostInfo]:
    """``host1:2,host2:4`` -> [HostInfo('host1', 2), HostInfo('host2', 4)]."""
    return _parse_hosts(hosts_string)


def parse_host_files(filename: str) -> str:
    """A host file (``hostname slots=N`` lines) as a ``-H`` string: ``host1:2,host2:4``."""
    return format_hosts(parse_hostfile(filename))


def parse_hosts_and_slots(hosts: str) -> Tuple[List[str], Dict[str, int]]:
    """``host1:2,host2:4`` -> (['host1', 'host2'], {'host1': 2, 'host2': 4})."""
    parsed = _parse_hosts(hosts)
    return [h.hostname for h in parsed], {h.hostname: h.slots for h in parsed}


def get_host_assignments(hosts: Sequence[HostInfo], min_num_proc: int,
                         max_num_proc: Optional[int] = None) -> List[SlotInfo]:
    """Places ranks on `hosts` in order, filling each host's slots: as many ranks as there
    are slots, at most `max_num_proc`.

    Raises:
        ValueError: the hosts have fewer than `min_num_proc` slots.
    """
    total = sum(h.slots for h in hosts)
    if total < min_num_proc:
        raise ValueError("Not enough slots on the hosts to fulfil the slots requirement: %d slot(s) are "
                         "available, %d are required" % (total, min_num_proc))
    return assign_slots(hosts, total if max_num_proc is None else min(total, max_num_proc))
