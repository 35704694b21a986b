# elastic_rendezvous.py - how elastic workers and the elastic driver (package
# hvd-elastic) talk through the job's rendezvous store: the keys, the value
# formats, and the worker's side of it (joining a round at hvd.init(),
# hearing about host changes). docs/elastic.md describes the protocol.
"""The elastic rendezvous protocol (worker side and shared definitions)."""

import dataclasses
import os
import sys
import threading
import time

__all__ = ["Assignment", "LeftElasticJob", "ready_key", "assignment_key", "notification_key",
           "worker_id", "is_elastic", "join_round", "round_horizon", "start_notification_listener"]

# A worker is known by where the driver started it: "<host>:<slot on the host>"
# (Horovod's naming). It stays the same for the life of the process.
READY_PREFIX = "elastic/ready/"


def ready_key(worker):
    """Worker -> driver: the value is how many times this worker joined before (0, 1, ...)."""
    return READY_PREFIX + worker


def assignment_key(worker, joins):
    """Driver -> worker: where the worker's join number `joins` puts it (an Assignment)."""
    return "elastic/assign/%s/%d" % (worker, joins)


def notification_key(number):
    """Driver -> workers: host update number `number` (1, 2, ...): "<timestamp> <HostUpdateResult>"."""
    return "elastic/notify/%d" % number


@dataclasses.dataclass(frozen=True)
class Assignment:
    """A worker's place in one round of an elastic job, or None fields when it has none."""

    round: int
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    # The timestamp of the newest host update the driver had published when it
    # formed the round: the round already reflects it and every older one.
    horizon: float = 0.0

    EXIT = b"exit"  # the value for a worker that is not part of the new round

    def encode(self):
        return ("%d %d %d %d %d %d %d %.6f" % (self.round, self.rank, self.size, self.local_rank, self.local_size,
                                               self.cross_rank, self.cross_size, self.horizon)).encode("ascii")

    @classmethod
    def decode(cls, value):
        """The Assignment in `value`, or None for Assignment.EXIT."""
        if value == cls.EXIT:
            return None
        fields = value.decode("ascii").split()
        return cls(*(int(field) for field in fields[:7]), float(fields[7]))

    def environment(self):
        """The variables hvd-core's engine reads its place in the job from."""
        return {"HOROVOD_RANK": str(self.rank), "HOROVOD_SIZE": str(self.size),
                "HOROVOD_LOCAL_RANK": str(self.local_rank), "HOROVOD_LOCAL_SIZE": str(self.local_size),
                "HOROVOD_CROSS_RANK": str(self.cross_rank), "HOROVOD_CROSS_SIZE": str(self.cross_size),
                "HVD_RENDEZVOUS_ROUND": str(self.round)}


class LeftElasticJob(SystemExit):
    """Raised in a worker that the elastic driver left out of the next round: the process
    exits (with status 0) unless something catches it; the driver stops it anyway."""

    def __init__(self, message):
        super().__init__(0)
        self.message = message
        sys.stderr.write(message + "\n")
        sys.stderr.flush()

    def __str__(self):
        return self.message


def is_elastic():
    """Whether this process is a worker of an elastic job (started by the elastic driver)."""
    return os.environ.get("HOROVOD_ELASTIC") == "1"


_identity = None
_joins = 0
_assignment = None  # this worker's place in its current round
_lock = threading.Lock()


def worker_id():
    """This worker's id, fixed at its first use: "<HOROVOD_HOSTNAME>:<HOROVOD_LOCAL_RANK>" as the
    driver started it (the variables change with each round; the id does not)."""
    global _identity
    if _identity is None:
        _identity = "%s:%s" % (os.environ.get("HOROVOD_HOSTNAME", ""), os.environ.get("HOROVOD_LOCAL_RANK", "0"))
    return _identity


def _client(timeout):
    from horovod.common.rendezvous import RendezvousClient
    return RendezvousClient(os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
                            int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]),
                            os.environ["HOROVOD_SECRET_KEY"], timeout=timeout)


def _join_timeout():
    # The driver ends the job itself within its elastic timeout when no round
    # can be formed; this bound only matters when the driver is gone.
    return float(os.environ.get("HOROVOD_ELASTIC_TIMEOUT", "600")) + 60.0


def join_round():
    """Tells the driver this worker is ready and waits for its place in the next round;
    sets the HOROVOD_* variables the engine starts from. Called by hvd.init() in an
    elastic job. A worker the driver leaves out (its host was removed) exits here."""
    global _joins, _assignment
    with _lock:
        worker = worker_id()
        client = _client(timeout=_join_timeout())
        client.set(ready_key(worker), str(_joins).encode("ascii"))
        value = client.get(assignment_key(worker, _joins), timeout=_join_timeout())
        _joins += 1
    assignment = Assignment.decode(value)
    if assignment is None:
        raise LeftElasticJob("hvd: elastic worker %s is not part of the job's next round (its host or slot was "
                             "removed); exiting" % worker)
    os.environ.update(assignment.environment())
    _assignment = assignment
    return assignment


def round_horizon():
    """The timestamp up to which host updates are already part of this worker's round (None
    outside an elastic job): such updates need no reset."""
    return _assignment.horizon if _assignment is not None else None


_listener = None


def start_notification_listener(deliver):
    """Starts (once per process) a thread that passes every host update the driver
    publishes from now on to ``deliver(timestamp, update_result)``."""
    global _listener
    with _lock:
        if _listener is None:
            _listener = threading.Thread(target=_listen, args=(deliver,), name="hvd-elastic-notifications",
                                         daemon=True)
            _listener.start()
    return _listener


def _listen(deliver):
    # From the first update on: one published after this worker's round
    # formed but before this thread started still needs acting on; older ones
    # are skipped by their timestamp.
    client = _client(timeout=5.0)
    number = 1
    while True:
        try:
            value = client.get(notification_key(number), timeout=3600.0)
        except Exception:
            # Not published yet within the wait, or the store is briefly
            # unreachable: ask again (the driver ends the job if it is gone).
            time.sleep(0.5)
            continue
        timestamp, result = value.decode("ascii").split()
        horizon = round_horizon()
        if horizon is None or float(timestamp) > horizon:
            deliver(float(timestamp), int(result))
        number += 1
