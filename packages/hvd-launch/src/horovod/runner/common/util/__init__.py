"""Horovod's ``horovod.runner.common.util`` modules, kept importable by their old paths.

Each module is a thin layer over the code that serves hvd's launcher and
engine; see docs/compatibility.md for what each provides.
"""
