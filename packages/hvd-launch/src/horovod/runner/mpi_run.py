# mpi_run.py - Horovod's horovod.runner.mpi_run queries (which MPI is on PATH),
# over hvd's mpirun detection in horovod.runner.mpi.
"""Which MPI implementation ``mpirun`` belongs to, under Horovod's names."""

import os
import shutil
from typing import Dict, Optional

from horovod.runner.errors import MpiNotFoundError
from horovod.runner.mpi import MPICH, OPEN_MPI, detect_mpirun

__all__ = ["mpi_available", "is_open_mpi", "is_spectrum_mpi", "is_mpich", "is_intel_mpi"]

# Horovod's names for the implementations (what _get_mpi_implementation returns).
_OMPI_IMPL = "OpenMPI"
_SMPI_IMPL = "SpectrumMPI"
_MPICH_IMPL = "MPICH"
_IMPI_IMPL = "IntelMPI"
_UNKNOWN_IMPL = "Unknown"
_MISSING_IMPL = "Missing"


def _get_mpi_implementation(env: Optional[Dict[str, str]] = None) -> str:
    """One of OpenMPI, MPICH, Unknown (an mpirun hvd cannot drive) or Missing (no mpirun)."""
    if shutil.which("mpirun", path=(env or os.environ).get("PATH")) is None:
        return _MISSING_IMPL
    try:
        flavour = detect_mpirun(env).flavour
    except MpiNotFoundError:
        return _UNKNOWN_IMPL
    return {OPEN_MPI: _OMPI_IMPL, MPICH: _MPICH_IMPL}[flavour]


def mpi_available(env: Optional[Dict[str, str]] = None) -> bool:
    """True when an mpirun that hvd can launch with (Open MPI or MPICH) is on PATH."""
    return _get_mpi_implementation(env) not in (_UNKNOWN_IMPL, _MISSING_IMPL)


def is_open_mpi(env: Optional[Dict[str, str]] = None) -> bool:
    return _get_mpi_implementation(env) == _OMPI_IMPL


def is_spectrum_mpi(env: Optional[Dict[str, str]] = None) -> bool:
    """False: Spectrum MPI's mpirun is not supported by hvd's launcher."""
    return _get_mpi_implementation(env) == _SMPI_IMPL


def is_mpich(env: Optional[Dict[str, str]] = None) -> bool:
    return _get_mpi_implementation(env) == _MPICH_IMPL


def is_intel_mpi(env: Optional[Dict[str, str]] = None) -> bool:
    """False: Intel MPI's mpirun is not supported by hvd's launcher."""
    return _get_mpi_implementation(env) == _IMPI_IMPL
