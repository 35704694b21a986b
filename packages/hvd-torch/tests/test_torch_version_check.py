# test_torch_version_check.py - torch is not a requirement of hvd-torch, so
# `import horovod.torch` itself refuses a missing or too old torch (< 2.4, no
# torch.library.custom_op) with a message naming what to install. A stand-in
# `torch` package first on sys.path plays the old release.
import os
import subprocess
import sys

import pytest

pytest.importorskip("horovod.torch")


def _import_with_fake_torch(tmp_path, body):
    if body is not None:
        (tmp_path / "torch").mkdir()
        (tmp_path / "torch" / "__init__.py").write_text(body)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", "import horovod.torch"], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_torch_older_than_2_4_is_refused_by_name(tmp_path):
    result = _import_with_fake_torch(tmp_path, "__version__ = '2.3.1+cpu'\nclass library:\n    pass\n")
    assert result.returncode != 0
    assert "horovod.torch needs PyTorch >= 2.4" in result.stderr and "torch 2.3.1+cpu is installed" in result.stderr


def test_a_torch_without_custom_op_is_refused(tmp_path):
    result = _import_with_fake_torch(tmp_path, "__version__ = '2.5.0'\nclass library:\n    pass\n")
    assert result.returncode != 0 and "torch.library.custom_op" in result.stderr, result.stderr


def test_missing_torch_names_the_cpu_index(tmp_path):
    # A `torch` that fails to import stands in for an environment without torch.
    result = _import_with_fake_torch(tmp_path, "raise ImportError('No module named torch')\n")
    assert result.returncode != 0
    assert "https://download.pytorch.org/whl/cpu" in result.stderr, result.stderr
