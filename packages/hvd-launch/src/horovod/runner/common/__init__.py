"""Horovod's ``horovod.runner.common`` package path (its shared launcher utilities)."""
