# driver.py - the elastic driver: one loop that owns the job's membership.
#
# It starts a worker process per assigned slot, and forms a new *round* (a
# numbered membership: which worker has which rank) whenever the workers
# reset - after a failure, or after host discovery changed the hosts. Every
# input arrives as an event on one queue - workers registering for the next
# round (through the rendezvous store), discovery results, signals; worker
# exits and engines gone silent (frozen workers) are polled for - and every
# wait has a deadline, so a change in one place can never leave the driver
# stuck in another (Horovod issue 3014). docs/elastic.md describes the protocol.
"""The elastic driver behind ``horovodrun --min-np/--max-np/--host-discovery-script``."""

import dataclasses
import hashlib
import os
import queue
import signal
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Set, Tuple

from horovod.common.elastic import HostUpdateResult
from horovod.common.elastic_rendezvous import READY_PREFIX, Assignment, assignment_key, notification_key
from horovod.runner.elastic.constants import RESET_LIMIT_EXCEEDED_MESSAGE, WORKERS_FAILED_MESSAGE
from horovod.runner.elastic.discovery import HostDiscovery, HostDiscoveryError, HostManager
from horovod.runner.hosts import HostSlots, SlotInfo, assign_slots, is_local_host, local_host_names
from horovod.runner.job import OutputWriter, Worker, WorkerExit, kill_deadline_seconds
from horovod.runner.job_setup import LaunchSettings, LivenessWatch, base_worker_env, frozen_reason, worker_command

# How often the discovery script runs, and how long the driver waits for
# enough slots (both read when used, so tests may change them).
DISCOVER_HOSTS_FREQUENCY_SECS = 1.0
ELASTIC_TIMEOUT_SECS = 600

_TICK_SECONDS = 0.05


@dataclasses.dataclass
class ElasticSettings:
    """An elastic job: the launch settings of a static one, plus where hosts come from and
    how many ranks it may have."""

    launch: LaunchSettings
    discovery: HostDiscovery
    num_proc: int  # slots to wait for before the first round
    min_num_proc: int
    max_num_proc: Optional[int] = None
    elastic_timeout: Optional[float] = None  # None: ELASTIC_TIMEOUT_SECS
    reset_limit: Optional[int] = None
    cooldown_range: Optional[Tuple[int, int]] = None

    def timeout(self) -> float:
        return float(self.elastic_timeout if self.elastic_timeout is not None else ELASTIC_TIMEOUT_SECS)


@dataclasses.dataclass
class ElasticResult:
    """How an elastic job ended."""

    exit_code: int
    error: Optional[str] = None  # why it failed, for the user
    first_failure: Optional[WorkerExit] = None
    interrupted_by: Optional[int] = None


class _Member:
    """One worker process, from its start to its exit."""

    def __init__(self, host: str, slot: int, label: str):
        self.host = host
        self.slot = slot
        self.id = f"{host}:{slot}"
        self.label = label
        self.worker: Optional[Worker] = None
        self.answered: Set[int] = set()  # join numbers the driver has answered
        self.waiting_join: Optional[int] = None  # a join the driver has not answered yet
        self.ranks: Dict[int, int] = {}  # round -> rank
        self.exit: Optional[WorkerExit] = None
        self.dismissed = False  # stopped by the driver on purpose: its exit is no failure
        self.stop_reason: Optional[str] = None  # why the driver stopped it as failed

    @property
    def running(self) -> bool:
        return self.exit is None

    def describe(self, round_number: int) -> str:
        rank = self.ranks.get(round_number)
        return f"worker {self.id}" + (f" (rank {rank})" if rank is not None else "")


_RUNNING, _RESETTING, _FORMING = "running", "resetting", "forming"


class ElasticDriver:
    """Runs one elastic job on an already started rendezvous store."""

    def __init__(self, settings: ElasticSettings, server, address: str, port: int, secret: str,
                 interface: Optional[str] = None):
        self._settings = settings
        self._server = server
        self._address, self._port, self._secret = address, port, secret
        self._interface = interface
        self._hosts = HostManager(settings.discovery, settings.cooldown_range)
        self._events: "queue.Queue[tuple]" = queue.Queue()
        self._writer = OutputWriter(settings.launch.prefix_timestamp)
        self._members: List[_Member] = []
        self._round = 0
        self._phase = _FORMING
        self._phase_since = time.monotonic()
        self._resets = 0
        self._notifications = 0
        self._last_notification = 0.0
        self._discovery_failing_since: Optional[float] = None
        self._result: Optional[ElasticResult] = None
        self._stop_discovery = threading.Event()
        self._local_names = local_host_names()
        self._failed_in_order: List[_Member] = []  # as their exits were seen

    # -- the loop --------------------------------------------------------------

    def run(self) -> ElasticResult:
        """Runs the job to its end and returns how it ended."""
        previous_handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                previous_handlers[sig] = signal.signal(sig, lambda s, _f: self._events.put(("signal", s)))
        self._server.watch(self._on_store_change)
        self._liveness = LivenessWatch(self._server)
        discovery = None
        try:
            try:
                self._hosts.update_available_hosts()
            except HostDiscoveryError as e:
                # A script that fails on its first run is a setup error.
                return ElasticResult(1, error=str(e))
            self._say(f"hosts: {self._hosts.current_hosts}")
            discovery = threading.Thread(target=self._discover, name="hvd-elastic-discovery", daemon=True)
            discovery.start()
            while self._result is None:
                try:
                    event = self._events.get(timeout=_TICK_SECONDS)
                except queue.Empty:
                    event = None
                if event is not None:
                    self._handle(event)
                self._poll_workers()
                self._stop_frozen()
                self._advance()
            return self._result
        finally:
            self._stop_discovery.set()
            self._stop_all()
            if discovery is not None:
                discovery.join(timeout=5)
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)

    def _discover(self):
        while not self._stop_discovery.wait(DISCOVER_HOSTS_FREQUENCY_SECS):
            try:
                self._events.put(("hosts", self._settings.discovery.find_available_hosts_and_slots()))
            except HostDiscoveryError as e:
                self._events.put(("discovery_failed", str(e)))
            except Exception as e:  # a bug here must not silently end discovery
                self._events.put(("discovery_failed", f"{type(e).__name__}: {e}"))

    def _on_store_change(self, key: bytes, value: bytes) -> None:
        # Runs on the store's request threads: only hand the event over.
        if key.startswith(READY_PREFIX.encode()):
            try:
                self._events.put(("ready", key[len(READY_PREFIX):].decode(), int(value)))
            except ValueError:
                pass

    # -- events ----------------------------------------------------------------

    def _handle(self, event: tuple) -> None:
        kind = event[0]
        if kind == "ready":
            member = self._member(event[1])
            if member is not None and member.running and event[2] not in member.answered:
                member.waiting_join = event[2]
        elif kind == "hosts":
            self._discovery_failing_since = None
            update = self._hosts.apply(event[1])
            if update != HostUpdateResult.no_update:
                self._say(f"hosts changed: {self._hosts.current_hosts}")
                if self._phase == _RUNNING and self._desired_slots() != self._current_slots():
                    self._notify(update)
        elif kind == "discovery_failed":
            if self._discovery_failing_since is None:
                self._discovery_failing_since = time.monotonic()
                self._say(f"host discovery failed (retrying with the last known hosts): {event[1]}")
            elif time.monotonic() - self._discovery_failing_since > self._settings.timeout():
                self._fail(f"host discovery kept failing for more than {self._settings.timeout():g} s "
                           f"(--elastic-timeout): {event[1]}")
        elif kind == "signal":
            self._result = ElasticResult(128 + event[1], interrupted_by=event[1])

    def _stop_frozen(self) -> None:
        # Once a reset began, the members that have not rejoined are suspects:
        # a shorter silence gives a frozen one away.
        resetting = self._phase == _RESETTING
        start = "r%d" % self._round
        for _, rank, seconds in self._liveness.silent(start, suspicious=resetting):
            member = next((m for m in self._current() if m.ranks[self._round] == rank), None)
            if member is None or not member.running or member.waiting_join is not None \
                    or member.stop_reason is not None:
                continue
            self._say(f"{member.describe(self._round)} on {member.host} stopped responding ({seconds:.1f} s "
                      f"without a sign of life); killing it and blacklisting {member.host}")
            self._stop_as_failed(member, frozen_reason(seconds), kill=True)

    def _poll_workers(self) -> None:
        for member in self._members:
            if member.exit is not None or member.worker is None:
                continue
            member.worker.kill_if_overdue(kill_deadline_seconds())
            if member.worker.process.poll() is None:
                continue
            member.exit = member.worker.exit_status()
            if member.stop_reason is not None:
                member.exit.reason = member.stop_reason
            if member.dismissed:
                continue
            if member.exit.failed:
                self._failed_in_order.append(member)
                self._hosts.blacklist(member.host)
                self._say(f"{member.describe(self._round)} {member.exit.describe()}; host {member.host} "
                          "blacklisted")

    # -- phases ----------------------------------------------------------------

    def _current(self) -> List[_Member]:
        """The members of the current round that the driver has not dismissed."""
        return [m for m in self._members if self._round in m.ranks and not m.dismissed]

    def _enter(self, phase: str) -> None:
        self._phase, self._phase_since = phase, time.monotonic()
        if phase == _RESETTING:
            self._abort_round_start()

    def _abort_round_start(self) -> None:
        # Workers still starting their engine for this round wait for every
        # rank's address; a rank that failed never publishes one. A marker in
        # its place makes their start fail at once (they then rejoin) instead
        # of after HOROVOD_GLOO_TIMEOUT_SECONDS.
        prefix = "%s/r%d/peer/" % (hashlib.sha256(self._secret.encode()).hexdigest()[:16], self._round)
        for member in self._members:
            rank = member.ranks.get(self._round)
            if rank is not None and self._server.read(prefix + str(rank)) is None:
                self._server.put(prefix + str(rank), b"!round %d was abandoned before it started: a worker "
                                 b"failed or left" % self._round)

    def _stop_as_failed(self, member: _Member, reason: str, kill: bool = False) -> None:
        member.stop_reason = reason
        self._hosts.blacklist(member.host)
        if kill:
            member.worker.kill()
        else:
            member.worker.request_stop()

    def _advance(self) -> None:
        if self._result is not None:
            return
        now = time.monotonic()
        members = self._current()
        if self._phase == _RUNNING:
            if members and all(not m.running for m in members) and not any(m.exit.failed for m in members):
                self._result = ElasticResult(0)
                return
            if any(m.waiting_join is not None or (m.exit is not None and m.exit.failed) for m in members):
                self._enter(_RESETTING)
        if self._phase == _RESETTING:
            pending = [m for m in members if m.running and m.waiting_join is None]
            if pending and now - self._phase_since > self._settings.timeout():
                for member in pending:
                    self._say(f"{member.describe(self._round)} neither rejoined nor exited within "
                              f"{self._settings.timeout():g} s of the reset; stopping it and blacklisting "
                              f"{member.host}")
                    self._stop_as_failed(member, f"did not rejoin within {self._settings.timeout():g} s "
                                                 "(--elastic-timeout) after the other workers reset")
                return
            if pending:
                return
            succeeded = [m for m in members if m.exit is not None and not m.exit.failed]
            failed = [m for m in members if m.exit is not None and m.exit.failed]
            if succeeded:
                # Training finished on some workers: the job is done.
                self._finish_after_success(failed)
                return
            if not any(m.waiting_join is not None for m in members):
                self._fail_workers(failed)
                return
            if all(self._hosts.is_blacklisted(m.host) for m in members):
                # Every host of the round failed: nothing is left to hand the
                # state on from (as Horovod, whatever the cooldown).
                self._fail_workers(failed)
                return
            self._enter(_FORMING)
        if self._phase == _FORMING:
            self._try_to_form_round(now)

    def _try_to_form_round(self, now: float) -> None:
        first = self._round == 0
        survivors = [m for m in self._members if m.running and not m.dismissed and m.waiting_join is not None]
        needed = self._settings.num_proc if first else self._settings.min_num_proc
        hosts = self._hosts.current_hosts
        if hosts.count_available_slots() < needed:
            if now - self._phase_since > self._settings.timeout():
                self._fail(f"only {hosts.count_available_slots()} slot(s) available after waiting "
                           f"{self._settings.timeout():g} s (--elastic-timeout), but the job needs at least "
                           f"{needed} (usable hosts: {hosts}; blacklisted: {self._blacklisted() or 'none'})")
            return
        if not first:
            if self._settings.reset_limit is not None and self._resets >= self._settings.reset_limit:
                self._fail(RESET_LIMIT_EXCEEDED_MESSAGE.format(self._settings.reset_limit))
                return
            self._resets += 1
        slots = self._assign(hosts.host_assignment_order, hosts.host_slots, survivors)
        kept = {s.hostname + ":" + str(s.local_rank) for s in slots}
        if not first and not any(m.id in kept for m in survivors):
            self._fail("none of the workers that hold the training state can take part in the next round "
                       f"(usable hosts: {hosts}); the state cannot be handed on")
            return
        self._round += 1
        by_id = {m.id: m for m in survivors}
        for member in survivors:
            if member.id not in kept:
                self._dismiss(member)
        started = []
        for slot in slots:
            assignment = Assignment(self._round, slot.rank, slot.size, slot.local_rank, slot.local_size,
                                    slot.cross_rank, slot.cross_size, horizon=self._last_notification)
            member = by_id.get(f"{slot.hostname}:{slot.local_rank}")
            if member is None:
                member = self._start_worker(slot, assignment)
                started.append(member)
            else:
                self._answer(member, member.waiting_join, assignment)
            member.ranks[self._round] = slot.rank
        self._say(f"round {self._round}: {len(slots)} rank(s) on {self._describe_hosts(slots)}"
                  + (f"; started {', '.join(m.id for m in started)}" if started and not first else "")
                  + ("" if first else f" (reset {self._resets})"))
        self._enter(_RUNNING)

    def _assign(self, order: Sequence[str], host_slots: Dict[str, int], survivors: List[_Member]) -> List[SlotInfo]:
        # Rank 0 hands its state to everyone after a reset, so it must be a
        # survivor: hosts where one holds slot 0 go first (oldest first).
        holders = {m.host for m in survivors if m.slot == 0}
        order = [h for h in order if h in holders] + [h for h in order if h not in holders]
        total = sum(host_slots[h] for h in order)
        limit = total if self._settings.max_num_proc is None else min(total, self._settings.max_num_proc)
        return assign_slots([HostSlots(h, host_slots[h]) for h in order], limit)

    def _desired_slots(self) -> Set[Tuple[str, int]]:
        hosts = self._hosts.current_hosts
        if hosts.count_available_slots() < self._settings.min_num_proc:
            return set()
        survivors = [m for m in self._current() if m.running]
        return {(s.hostname, s.local_rank) for s in self._assign(hosts.host_assignment_order, hosts.host_slots,
                                                                 survivors)}

    def _current_slots(self) -> Set[Tuple[str, int]]:
        return {(m.host, m.slot) for m in self._current()}

    # -- actions -------------------------------------------------------------

    def _answer(self, member: _Member, join: int, assignment: Optional[Assignment]) -> None:
        value = Assignment.EXIT if assignment is None else assignment.encode()
        self._server.put(assignment_key(member.id, join), value)
        member.answered.add(join)
        member.waiting_join = None

    def _dismiss(self, member: _Member) -> None:
        """Leaves `member` out of the new round: it is told to exit, and stopped."""
        member.dismissed = True
        if member.waiting_join is not None:
            self._answer(member, member.waiting_join, None)
        self._say(f"worker {member.id} is not part of round {self._round}; stopping it")
        member.worker.request_stop()

    def _start_worker(self, slot: SlotInfo, assignment: Assignment) -> _Member:
        launch = self._settings.launch
        member = _Member(slot.hostname, slot.local_rank, str(slot.rank))
        self._members.append(member)
        # The answer to its first join is there before it asks.
        self._answer(member, 0, assignment)
        env = base_worker_env(launch, self._address, self._port, self._secret, interface=self._interface)
        env["HOROVOD_ELASTIC"] = "1"
        env["HOROVOD_ELASTIC_TIMEOUT"] = str(int(self._settings.timeout()))
        command = worker_command(launch, slot, env, remote=not is_local_host(slot.hostname, self._local_names))
        if launch.output_filename:
            command.output_dir = os.path.join(os.path.abspath(launch.output_filename),
                                              f"worker.{slot.hostname}.{slot.local_rank}")
        member.worker = Worker(command)
        member.worker.start(self._writer)
        return member

    def _notify(self, update: HostUpdateResult) -> None:
        # Strictly increasing, as State.check_host_updates compares them.
        self._last_notification = max(time.time(), self._last_notification + 1e-3)
        self._notifications += 1
        self._server.put(notification_key(self._notifications),
                         ("%.6f %d" % (self._last_notification, int(update))).encode("ascii"))
        self._say(f"notifying the workers: hosts {update.name if update.name else int(update)}")

    def _finish_after_success(self, failed: List[_Member]) -> None:
        for member in self._current():
            if member.running:
                self._dismiss(member)
        if failed:
            self._fail_workers(failed)
        else:
            self._result = ElasticResult(0)

    def _fail_workers(self, failed: List[_Member]) -> None:
        failed = sorted(failed, key=lambda m: self._failed_in_order.index(m) if m in self._failed_in_order
                        else len(self._failed_in_order))
        first = failed[0].exit if failed else None
        detail = ""
        if failed:
            member = failed[0]
            detail = f" (the first: {member.describe(self._round)} on host {member.host} {member.exit.describe()})"
        self._fail(WORKERS_FAILED_MESSAGE + detail, first_failure=first)

    def _fail(self, error: str, first_failure: Optional[WorkerExit] = None) -> None:
        code = 1
        if first_failure is not None and first_failure.reason is None:
            code = 128 + first_failure.signal if first_failure.signal is not None else (first_failure.code or 1)
        self._result = ElasticResult(code, error=error, first_failure=first_failure)

    def _stop_all(self) -> None:
        running = [m for m in self._members if m.worker is not None and m.worker.process.poll() is None]
        for member in running:
            member.dismissed = True
            member.worker.request_stop()
        deadline = time.monotonic() + kill_deadline_seconds() + 1
        while running and time.monotonic() < deadline:
            for member in running:
                member.worker.kill_if_overdue(kill_deadline_seconds())
            running = [m for m in running if m.worker.process.poll() is None]
            time.sleep(_TICK_SECONDS)
        for member in self._members:
            if member.worker is not None:
                for thread in member.worker.threads:
                    thread.join(timeout=5)

    # -- helpers ---------------------------------------------------------------

    def _member(self, member_id: str) -> Optional[_Member]:
        # The newest member of that id: a slot may have had several workers.
        for member in reversed(self._members):
            if member.id == member_id:
                return member
        return None

    def _blacklisted(self) -> str:
        return ", ".join(h for h in self._hosts.discovered_hosts if self._hosts.is_blacklisted(h))

    @staticmethod
    def _describe_hosts(slots: Sequence[SlotInfo]) -> str:
        counts: Dict[str, int] = {}
        for slot in slots:
            counts[slot.hostname] = counts.get(slot.hostname, 0) + 1
        return ", ".join(f"{h} ({n})" for h, n in counts.items())

    def _say(self, message: str) -> None:
        sys.stderr.write(f"horovodrun: elastic: {message}\n")
        sys.stderr.flush()
