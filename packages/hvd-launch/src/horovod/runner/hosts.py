"""Host lists (``-H``, ``--hostfile``) and the assignment of ranks to slots.

The assignment is Horovod's: hosts are filled in the order given, each up to
its slot count, until ``num_proc`` ranks are placed.  ``local_rank`` counts
ranks within a host, ``cross_rank`` counts hosts that hold a rank with the
same ``local_rank``.  Everything here is a pure function so multi-host plans
can be tested without starting anything.
"""

import dataclasses
import re
import socket
from typing import Dict, List, Optional, Sequence

from horovod.runner.errors import BadInputError

# A host name, an IPv4 address or a bracketed IPv6 address; the slot count
# after the colon is optional and defaults to one slot.
_HOST_NAME = r"[A-Za-z0-9_.\-]+"
_HOST_ENTRY = re.compile(
    r"^(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<name>" + _HOST_NAME + r"))(?::(?P<slots>[^:]*))?$")
_HOSTFILE_SLOTS = re.compile(r"^slots=(?P<slots>\S*)$")


@dataclasses.dataclass(frozen=True)
class HostSlots:
    """A host and how many ranks it may run."""

    hostname: str
    slots: int

    @classmethod
    def from_string(cls, text: str) -> "HostSlots":
        """Parses one ``hostname:slots`` entry (Horovod's ``HostInfo.from_string``)."""
        (host,) = parse_hosts(text)
        return host


@dataclasses.dataclass(frozen=True)
class SlotInfo:
    """Where one rank runs and its place in the job (the worker's HOROVOD_* ids)."""

    hostname: str
    rank: int
    local_rank: int
    cross_rank: int
    size: int
    local_size: int
    cross_size: int

    def to_env(self) -> Dict[str, str]:
        """Returns the HOROVOD_* rank variables a worker reads at ``hvd.init()``."""
        return {
            "HOROVOD_HOSTNAME": self.hostname,
            "HOROVOD_RANK": str(self.rank),
            "HOROVOD_SIZE": str(self.size),
            "HOROVOD_LOCAL_RANK": str(self.local_rank),
            "HOROVOD_LOCAL_SIZE": str(self.local_size),
            "HOROVOD_CROSS_RANK": str(self.cross_rank),
            "HOROVOD_CROSS_SIZE": str(self.cross_size),
        }

    def to_response_string(self) -> str:
        """``rank,size,local_rank,local_size,cross_rank,cross_size`` (Horovod's wire form)."""
        return ",".join(str(v) for v in (self.rank, self.size, self.local_rank, self.local_size,
                                         self.cross_rank, self.cross_size))


def _parse_slot_count(text: str, where: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise BadInputError(
            f"{where}: slot count {text!r} is not a positive integer "
            "(expected host:N, e.g. -H server1:4,server2:4)")
    return int(text)


def parse_hosts(hosts: str) -> List[HostSlots]:
    """Parses a ``-H`` value such as ``host1:2,host2:4`` (a host without ``:N`` has 1 slot).

    Raises:
        BadInputError: the list is empty, an entry is malformed, or a host repeats.
    """
    entries = [entry.strip() for entry in hosts.split(",")]
    if not hosts.strip() or any(not entry for entry in entries):
        raise BadInputError(
            f"-H/--hosts {hosts!r} has an empty entry; expected a comma-separated list "
            "like host1:2,host2:2")
    result = []
    for entry in entries:
        match = _HOST_ENTRY.match(entry)
        if not match:
            raise BadInputError(
                f"-H/--hosts entry {entry!r} is malformed; expected hostname[:slots], "
                "e.g. server1:4 or [fe80::1]:2")
        hostname = match.group("ipv6") or match.group("name")
        slots = match.group("slots")
        count = 1 if slots is None else _parse_slot_count(slots, f"-H/--hosts entry {entry!r}")
        result.append(HostSlots(hostname, count))
    _reject_duplicates(result, "-H/--hosts")
    return result


def parse_hostfile(path: str) -> List[HostSlots]:
    """Reads a host file: one ``hostname slots=N`` (or ``hostname:N``, or ``hostname``) per line.

    ``#`` starts a comment; blank lines are ignored.

    Raises:
        BadInputError: the file is missing, empty, or has a malformed line.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise BadInputError(f"cannot read host file {path!r}: {e.strerror}") from None
    result = []
    for number, raw in enumerate(lines, start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"host file {path}:{number}"
        fields = line.split()
        if len(fields) > 2:
            raise BadInputError(f"{where}: {raw.strip()!r} is malformed; expected 'hostname slots=N'")
        if len(fields) == 2:
            match = _HOSTFILE_SLOTS.match(fields[1])
            if not match or ":" in fields[0]:
                raise BadInputError(
                    f"{where}: {raw.strip()!r} is malformed; expected 'hostname slots=N'")
            entry_match = _HOST_ENTRY.match(fields[0])
            if not entry_match:
                raise BadInputError(f"{where}: host name {fields[0]!r} is malformed")
            hostname = entry_match.group("ipv6") or entry_match.group("name")
            result.append(HostSlots(hostname, _parse_slot_count(match.group("slots"), where)))
        else:
            entry_match = _HOST_ENTRY.match(fields[0])
            if not entry_match:
                raise BadInputError(
                    f"{where}: {raw.strip()!r} is malformed; expected 'hostname slots=N'")
            hostname = entry_match.group("ipv6") or entry_match.group("name")
            slots = entry_match.group("slots")
            result.append(HostSlots(hostname, 1 if slots is None else _parse_slot_count(slots, where)))
    if not result:
        raise BadInputError(f"host file {path!r} lists no hosts")
    _reject_duplicates(result, f"host file {path}")
    return result


def _reject_duplicates(hosts: Sequence[HostSlots], where: str) -> None:
    seen = set()
    for host in hosts:
        if host.hostname in seen:
            # Two entries for one host would give it two independent sets of
            # local ranks, which the engine's shared-memory transport cannot tell apart.
            raise BadInputError(
                f"{where}: host {host.hostname!r} is listed twice; give it once with the "
                "total slot count")
        seen.add(host.hostname)


def format_hosts(hosts: Sequence[HostSlots]) -> str:
    """Returns the ``-H`` spelling of a host list (``host1:2,host2:2``)."""
    return ",".join(
        f"[{h.hostname}]:{h.slots}" if ":" in h.hostname else f"{h.hostname}:{h.slots}"
        for h in hosts)


def assign_slots(hosts: Sequence[HostSlots], num_proc: int) -> List[SlotInfo]:
    """Places ``num_proc`` ranks on ``hosts`` in order and returns one SlotInfo per rank.

    Raises:
        BadInputError: ``num_proc`` is not positive or exceeds the total slot count.
    """
    if num_proc < 1:
        raise BadInputError(f"-np/--num-proc must be at least 1, got {num_proc}")
    total = sum(h.slots for h in hosts)
    if num_proc > total:
        raise BadInputError(
            f"-np {num_proc} is larger than the {total} slot(s) available on "
            f"{format_hosts(hosts)}; add hosts or slots, or lower -np")
    placed = []  # (hostname, local_rank)
    for host in hosts:
        for local_rank in range(host.slots):
            if len(placed) == num_proc:
                break
            placed.append((host.hostname, local_rank))
    local_sizes: Dict[str, int] = {}
    for hostname, _ in placed:
        local_sizes[hostname] = local_sizes.get(hostname, 0) + 1
    # Hosts that hold a given local rank, in host order: the cross communicator
    # of that local rank.
    hosts_by_local_rank: Dict[int, List[str]] = {}
    for hostname, local_rank in placed:
        hosts_by_local_rank.setdefault(local_rank, []).append(hostname)
    return [
        SlotInfo(
            hostname=hostname,
            rank=rank,
            local_rank=local_rank,
            cross_rank=hosts_by_local_rank[local_rank].index(hostname),
            size=num_proc,
            local_size=local_sizes[hostname],
            cross_size=len(hosts_by_local_rank[local_rank]),
        )
        for rank, (hostname, local_rank) in enumerate(placed)
    ]


def local_host_names() -> set:
    """Returns the names under which this machine is started without ssh.

    Only ``localhost``, ``127.0.0.1``, ``::1`` and this machine's own host name
    count: other loopback addresses such as ``127.0.0.2`` go through ssh, which
    lets one machine stand in for several hosts.
    """
    names = {"localhost", "127.0.0.1", "::1", "localhost.localdomain"}
    try:
        names.add(socket.gethostname())
        names.add(socket.getfqdn())
    except OSError:
        pass
    return names


def is_local_host(hostname: str, local_names: Optional[set] = None) -> bool:
    """Returns True when ``hostname`` names this machine (see :func:`local_host_names`)."""
    return hostname in (local_names if local_names is not None else local_host_names())
