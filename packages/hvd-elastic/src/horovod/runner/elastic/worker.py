# worker.py - Horovod's horovod.runner.elastic.worker names: the worker side
# of elastic training lives in hvd-core (horovod.common.elastic).
"""Horovod's ``horovod.runner.elastic.worker`` names, from ``horovod.common.elastic``."""

from horovod.common.elastic import HostUpdateResult, WorkerNotificationManager, notification_manager

__all__ = ["HostUpdateResult", "WorkerNotificationManager", "notification_manager"]
