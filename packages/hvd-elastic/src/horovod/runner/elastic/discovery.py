# discovery.py - which hosts an elastic job may use: the user's discovery
# script (or a fixed host list), and the driver's memory of them - the order
# in which they joined (the oldest keep the lowest ranks) and the blacklist of
# hosts whose workers failed, with the cooldown after which a host may be
# used again.
"""Host discovery and the blacklist of failed hosts (Horovod's names)."""

import logging
import random
import subprocess
import time
from typing import Dict, List, Optional, Sequence, Tuple

from horovod.common.elastic import HostUpdateResult
from horovod.runner.errors import BadInputError
from horovod.runner.hosts import parse_hosts

logger = logging.getLogger("horovod.elastic")

# Bounds of --blacklist-cooldown-range, in seconds (Horovod's).
DEFAULT_COOLDOWN_LOWER_LIMIT_SECONDS = 1
DEFAULT_COOLDOWN_UPPER_LIMIT_SECONDS = 60 * 60

# A discovery script that runs longer than this is stopped and counted as failed.
DISCOVERY_SCRIPT_TIMEOUT_SECONDS = 60.0


class HostDiscoveryError(RuntimeError):
    """Running host discovery failed (the script exited non-zero, hung, or printed a bad line)."""


class HostDiscovery:
    """Where the hosts of an elastic job come from."""

    def find_available_hosts_and_slots(self) -> Dict[str, int]:
        """The hosts that may be used now, each with its number of slots."""
        raise NotImplementedError()


class HostDiscoveryScript(HostDiscovery):
    """Runs `discovery_script`; every non-empty line of its output is ``host`` or
    ``host:slots`` (``slots`` defaults to `slots`, or 1)."""

    def __init__(self, discovery_script: str, slots: Optional[int] = None,
                 timeout: float = DISCOVERY_SCRIPT_TIMEOUT_SECONDS):
        self._discovery_script = discovery_script
        self._default_slots = slots or 1
        self._timeout = timeout

    def find_available_hosts_and_slots(self) -> Dict[str, int]:
        try:
            result = subprocess.run(self._discovery_script, shell=True, stdin=subprocess.DEVNULL,
                                    capture_output=True, timeout=self._timeout)
        except subprocess.TimeoutExpired:
            raise HostDiscoveryError(f"host discovery script {self._discovery_script!r} did not finish within "
                                     f"{self._timeout:g} s") from None
        stderr = result.stderr.decode("utf-8", "replace").strip()
        if result.returncode != 0:
            raise HostDiscoveryError(
                f"host discovery script {self._discovery_script!r} exited with code {result.returncode}"
                + (f": {stderr[-500:]}" if stderr else ""))
        hosts: Dict[str, int] = {}
        for line in result.stdout.decode("utf-8", "replace").splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                (host,) = parse_hosts(line)
            except (BadInputError, ValueError):  # ValueError: several hosts on one line
                raise HostDiscoveryError(f"host discovery script {self._discovery_script!r} printed {line!r}, "
                                         "which is not 'host' or 'host:slots'") from None
            # A line without ":slots" gets --slots-per-host.
            has_slots = line.rpartition("]")[2].count(":") == 1 if line.startswith("[") else ":" in line
            hosts[host.hostname] = host.slots if has_slots else self._default_slots
        return hosts


class FixedHosts(HostDiscovery):
    """A host list that changes only when ``set`` is called (-H / --hostfile in elastic mode)."""

    def __init__(self, host_slots: Dict[str, int]):
        self._host_slots = dict(host_slots)

    def find_available_hosts_and_slots(self) -> Dict[str, int]:
        return dict(self._host_slots)

    def set(self, host_slots: Dict[str, int]) -> None:
        self._host_slots = dict(host_slots)


def validate_cooldown_range(cooldown_range: Optional[Sequence[int]]) -> Optional[Tuple[int, int]]:
    """Checks --blacklist-cooldown-range MIN MAX; returns it as a tuple (None: no cooldown)."""
    if cooldown_range is None:
        return None
    low, high = cooldown_range
    if low < DEFAULT_COOLDOWN_LOWER_LIMIT_SECONDS:
        raise ValueError(f"--blacklist-cooldown-range: the lower limit {low} s is below the smallest allowed, "
                         f"{DEFAULT_COOLDOWN_LOWER_LIMIT_SECONDS} s")
    if high > DEFAULT_COOLDOWN_UPPER_LIMIT_SECONDS:
        raise ValueError(f"--blacklist-cooldown-range: the upper limit {high} s is above the largest allowed, "
                         f"{DEFAULT_COOLDOWN_UPPER_LIMIT_SECONDS} s")
    if high < low:
        raise ValueError(f"--blacklist-cooldown-range: the upper limit {high} s is below the lower limit {low} s")
    return int(low), int(high)


class HostState:
    """One host's standing: blacklisted or not, and until when its cooldown runs.

    Without a cooldown range a blacklisted host stays blacklisted. With one, the
    n-th time a host is blacklisted it may come back after
    ``low * 2**n + uniform(0, low)`` seconds, clamped to the range.
    """

    def __init__(self, cooldown_range: Optional[Tuple[int, int]] = None):
        self._cooldown_range = cooldown_range
        self._blacklisted = False
        self._blacklist_count = 0
        self._cooldown_end = 0.0

    def blacklist(self, now: Optional[float] = None) -> None:
        now = time.time() if now is None else now
        self._blacklisted = True
        if self._cooldown_range is None or self._cooldown_end > now:
            return
        low, high = self._cooldown_range
        self._blacklist_count += 1
        delay = low * (1 << self._blacklist_count) + random.uniform(0, 1) * low
        self._cooldown_end = now + max(low, min(high, delay))

    def whitelist(self) -> None:
        self._blacklisted = False
        self._cooldown_end = 0.0

    def is_blacklisted(self) -> bool:
        return self._blacklisted

    def is_resurrected(self, now: Optional[float] = None) -> bool:
        """Whether the host is blacklisted but its cooldown is over."""
        now = time.time() if now is None else now
        return self._blacklisted and 0 < self._cooldown_end <= now

    @property
    def cooldown_end(self) -> float:
        return self._cooldown_end


class DiscoveredHosts:
    """The usable hosts at one moment: their slots, in the order ranks are given out."""

    def __init__(self, host_slots: Dict[str, int], host_assignment_order: List[str]):
        self._host_slots = dict(host_slots)
        self._host_assignment_order = list(host_assignment_order)

    @property
    def host_slots(self) -> Dict[str, int]:
        return dict(self._host_slots)

    @property
    def available_hosts(self) -> set:
        return set(self._host_assignment_order)

    @property
    def host_assignment_order(self) -> List[str]:
        return list(self._host_assignment_order)

    def get_slots(self, host: str) -> int:
        return self._host_slots.get(host, 0)

    def count_available_slots(self) -> int:
        return sum(self.get_slots(h) for h in self._host_assignment_order)

    def __str__(self):
        return ", ".join(f"{h}:{self.get_slots(h)}" for h in self._host_assignment_order) or "(none)"


class HostManager:
    """Keeps the discovered hosts, the order they joined in and the blacklist."""

    def __init__(self, discovery: HostDiscovery, cooldown_range: Optional[Tuple[int, int]] = None):
        self._discovery = discovery
        self._cooldown_range = cooldown_range
        self._states: Dict[str, HostState] = {}
        self._host_slots: Dict[str, int] = {}
        self._order: List[str] = []  # every discovered host, oldest first

    def _state(self, host: str) -> HostState:
        if host not in self._states:
            self._states[host] = HostState(self._cooldown_range)
        return self._states[host]

    def update_available_hosts(self) -> HostUpdateResult:
        """Runs discovery once; returns what changed for the usable hosts (hosts or slots
        added or removed, blacklisted hosts whose cooldown ended counting as added).

        Raises:
            HostDiscoveryError: discovery failed; nothing changes then.
        """
        return self.apply(self._discovery.find_available_hosts_and_slots())

    def apply(self, host_slots: Dict[str, int], now: Optional[float] = None) -> HostUpdateResult:
        """Takes `host_slots` as the discovered hosts; returns what changed (see above)."""
        before = self.current_hosts.host_slots
        for host in list(self._states):
            if self._states[host].is_resurrected(now):
                logger.info("host %s is no longer blacklisted (its cooldown ended)", host)
                self._states[host].whitelist()
        self._host_slots = dict(host_slots)
        self._order = [h for h in self._order if h in host_slots] + [h for h in host_slots if h not in self._order]
        after = self.current_hosts.host_slots
        result = HostUpdateResult.no_update
        for host, slots in before.items():
            if after.get(host, 0) < slots:
                result |= HostUpdateResult.removed
        for host, slots in after.items():
            if before.get(host, 0) < slots:
                result |= HostUpdateResult.added
        return result

    @property
    def current_hosts(self) -> DiscoveredHosts:
        """The discovered hosts that are not blacklisted, oldest first."""
        usable = [h for h in self._order if not self._state(h).is_blacklisted()]
        return DiscoveredHosts({h: self._host_slots[h] for h in usable}, usable)

    @property
    def discovered_hosts(self) -> Dict[str, int]:
        """Every discovered host (blacklisted ones too) with its slots."""
        return dict(self._host_slots)

    def blacklist(self, host: str) -> None:
        if not self._state(host).is_blacklisted():
            logger.info("blacklisting host %s", host)
        self._state(host).blacklist()

    def is_blacklisted(self, host: str) -> bool:
        return self._state(host).is_blacklisted()

    def next_resurrection(self) -> Optional[float]:
        """When the earliest cooldown of a blacklisted, discovered host ends (time.time()), if any."""
        ends = [s.cooldown_end for h, s in self._states.items()
                if s.is_blacklisted() and s.cooldown_end > 0 and h in self._host_slots]
        return min(ends) if ends else None

    @staticmethod
    def order_available_hosts(available_hosts, prev_host_assignment_order):
        """`available_hosts` in the order of `prev_host_assignment_order`, new ones last."""
        order = [h for h in prev_host_assignment_order if h in available_hosts]
        return order + [h for h in available_hosts if h not in order]
