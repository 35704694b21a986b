# env.py - Horovod's horovod.runner.common.util.env: reading a worker's rank
# and size from whichever launcher started it.
"""Launcher environment helpers."""

import os
import re

from horovod.runner.common.util import secret

__all__ = ["get_env_rank_and_size", "is_exportable", "is_kubeflow_mpi", "LOG_LEVEL_STR"]

LOG_LEVEL_STR = ["FATAL", "ERROR", "WARNING", "INFO", "DEBUG", "TRACE"]

# Variables never forwarded to workers: shell functions, per-host settings,
# and the job secret (it travels separately).
IGNORE_REGEXES = {"BASH_FUNC_.*", "OLDPWD", ".*CUDA_VISIBLE_DEVICES", secret.HOROVOD_SECRET_KEY}

KUBEFLOW_MPI_EXEC = "/etc/mpi/kubexec.sh"

# (rank, size) variable pairs: horovodrun's own, Open MPI's, then PMI's (MPICH, Slurm).
_RANK_SIZE_VARIABLES = (("HOROVOD_RANK", "HOROVOD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                        ("PMI_RANK", "PMI_SIZE"))


def is_exportable(name):
    """True when environment variable `name` may be forwarded to remote workers."""
    return not any(re.match(pattern, name) for pattern in IGNORE_REGEXES)


def get_env_rank_and_size():
    """This process's (rank, size) as its launcher set them, or (0, 1) outside any launcher.

    Raises:
        RuntimeError: a launcher set only one of a rank/size pair.
    """
    for rank_name, size_name in _RANK_SIZE_VARIABLES:
        rank, size = os.environ.get(rank_name), os.environ.get(size_name)
        if rank is not None and size is not None:
            return int(rank), int(size)
        if rank is not None or size is not None:
            raise RuntimeError("Could not determine the rank and size of this process: only one of %s and %s "
                               "is set" % (rank_name, size_name))
    return 0, 1


def is_kubeflow_mpi():
    """True when running under the Kubeflow MPI Operator (its rsh agent is set)."""
    return os.environ.get("OMPI_MCA_plm_rsh_agent") == KUBEFLOW_MPI_EXEC
