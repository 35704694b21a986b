"""``horovodrun --check-build``: what this installation can actually run.

Frameworks count as available when their hvd binding imports (which imports
the framework); controllers and tensor operations are asked of hvd-core
(``gloo_built()``, ``mpi_built()``, ``nccl_built()``, ... as in Horovod), and
MPI additionally needs an ``mpirun`` on PATH.
"""

import importlib
import shutil
from typing import Dict, List, Tuple

FRAMEWORKS = (("TensorFlow", "horovod.tensorflow"), ("PyTorch", "horovod.torch"),
              ("MXNet", "horovod.mxnet"))


def _imports(module: str) -> bool:
    try:
        importlib.import_module(module)
        return True
    except Exception:  # A broken framework install must not break the report.
        return False


def _core_flag(core, name: str) -> bool:
    function = getattr(core, name, None)
    if function is None:
        return False
    try:
        return bool(function())
    except Exception:
        return False


def _mpi_library_found() -> bool:
    try:
        from horovod.common.basics import _find_mpi_library
    except ImportError:  # an hvd-core without the MPI data plane
        return False
    return _find_mpi_library() is not None


def build_info() -> Dict[str, List[Tuple[str, bool]]]:
    """Returns ``{"frameworks"|"controllers"|"tensor_operations": [(name, available), ...]}``."""
    frameworks = [(name, _imports(module)) for name, module in FRAMEWORKS]
    try:
        core = importlib.import_module("horovod.common")
        core_ok = True
    except Exception:
        core, core_ok = None, False
    mpirun = shutil.which("mpirun") is not None
    # hvd-core always has Gloo-style TCP/shared-memory transport; older cores
    # without gloo_built() are treated as having it when they import.
    gloo = core_ok and (_core_flag(core, "gloo_built") if hasattr(core, "gloo_built") else True)
    # mpirun launches the job (horovodrun --mpi); MPI tensor operations
    # (HOROVOD_CPU_OPERATIONS=mpi) also need the libmpi hvd-core would open.
    mpi_launch = core_ok and mpirun
    mpi_operations = mpi_launch and _mpi_library_found()
    operations = [
        ("NCCL", core_ok and _core_flag(core, "nccl_built")),
        ("DDL", core_ok and _core_flag(core, "ddl_built")),
        ("CCL", core_ok and _core_flag(core, "ccl_built")),
        ("MPI", mpi_operations),
        ("Gloo", gloo),
    ]
    return {"frameworks": frameworks,
            "controllers": [("MPI", mpi_launch), ("Gloo", gloo)],
            "tensor_operations": operations}


def check_build(verbose: bool = False) -> str:
    """Returns (and prints) the report of available frameworks, controllers and tensor operations.

    Args:
        verbose: unused; kept for Horovod compatibility.

    Returns:
        The report text that was printed.
    """
    from horovod.runner import __version__
    info = build_info()

    def section(title, rows):
        return [f"Available {title}:"] + [f"    [{'X' if ok else ' '}] {name}" for name, ok in rows]

    lines = [f"hvd (Horovod-compatible) v{__version__}:", ""]
    lines += section("Frameworks", info["frameworks"]) + [""]
    lines += section("Controllers", info["controllers"]) + [""]
    lines += section("Tensor Operations", info["tensor_operations"])
    text = "\n".join(lines) + "\n"
    print(text, end="")
    return text
