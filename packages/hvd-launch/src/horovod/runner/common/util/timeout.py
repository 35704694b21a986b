# timeout.py - Horovod's horovod.runner.common.util.timeout: a deadline that
# raises a descriptive error once it has passed.
"""Deadlines for launcher waits."""

import time

__all__ = ["Timeout", "TimeoutException"]


class TimeoutException(Exception):
    """A launcher wait ran past its deadline."""


class Timeout:
    """A deadline `timeout` seconds from now; `message` may contain ``{timeout}``."""

    def __init__(self, timeout, message):
        self._timeout = timeout
        self._deadline = time.time() + timeout
        self._message = message

    def remaining(self):
        """Seconds left, never negative."""
        return max(0.0, self._deadline - time.time())

    def timed_out(self):
        return time.time() > self._deadline

    def check_time_out_for(self, activity):
        """Raises TimeoutException naming `activity` once the deadline has passed."""
        if self.timed_out():
            raise TimeoutException("Timed out waiting for %s. %s" % (activity, self._message.format(
                timeout=self._timeout)))
