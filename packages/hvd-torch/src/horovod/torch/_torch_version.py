# horovod/torch/_torch_version.py - imported first by horovod.torch: torch
# must be installed (it is not a requirement of hvd-torch, see pyproject.toml)
# and new enough.
"""The installed torch, checked against the oldest release hvd-torch supports."""
import re

# The oldest torch hvd-torch supports: the collectives are torch.library
# custom ops (torch.library.custom_op, new in 2.4). pyproject.toml's `torch`
# extra states the same bound; tox.ini tests the oldest and newest.
OLDEST_TORCH = (2, 4)

try:
    import torch  # noqa: F401
except ImportError as e:  # torch is not a declared dependency (see pyproject.toml)
    raise ImportError("horovod.torch needs PyTorch >= %d.%d: install the torch build for your platform first "
                      "(CPU only: pip install torch --index-url https://download.pytorch.org/whl/cpu; others: "
                      "https://pytorch.org/get-started/locally/), then hvd-torch" % OLDEST_TORCH) from e


def _torch_release(version):
    """(major, minor) of a torch version string such as "2.13.0+cpu"."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


if _torch_release(torch.__version__) < OLDEST_TORCH or not hasattr(torch.library, "custom_op"):
    raise ImportError("horovod.torch needs PyTorch >= %d.%d (it registers its collectives with "
                      "torch.library.custom_op), but torch %s is installed: upgrade torch"
                      % (OLDEST_TORCH + (torch.__version__,)))
