"""Horovod's ``horovod.runner.util`` package path: helpers its tests and integrations import."""
