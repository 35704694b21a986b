# test_compatibility.py - what Horovod's test suites and integrations import
# from hvd-core and ask of it: horovod.common.util's names, the version
# string and distribution metadata, HOROVOD_TIMELINE=DYNAMIC (its ranks run
# rank_programs/compatibility.py).
import importlib.metadata
import os
import subprocess
import sys

import pytest

import horovod
from horovod.common import util

import ranks


def test_common_util_names_that_horovod_tests_import():
    from horovod.common.util import _cache, env, extension_available, gloo_built, mpi_built  # noqa: F401
    calls = []

    @util._cache
    def expensive(x, scale=1):
        calls.append(x)
        return x * scale

    assert expensive(2) == 2 and expensive(2) == 2 and expensive(2, scale=3) == 6
    assert calls == [2, 2]
    assert util.gloo_built() is True
    assert util.nccl_built() == 0 and util.ddl_built() is False and util.ccl_built() is False
    assert util.is_iterable([1]) and not util.is_iterable(3)


def test_env_sets_and_restores_variables(monkeypatch):
    monkeypatch.setenv("HVD_TEST_KEPT", "before")
    monkeypatch.delenv("HVD_TEST_NEW", raising=False)
    with util.env(HVD_TEST_KEPT="during", HVD_TEST_NEW="new", HVD_TEST_IGNORED=None):
        assert os.environ["HVD_TEST_KEPT"] == "during" and os.environ["HVD_TEST_NEW"] == "new"
        assert "HVD_TEST_IGNORED" not in os.environ
    assert os.environ["HVD_TEST_KEPT"] == "before" and "HVD_TEST_NEW" not in os.environ
    with pytest.raises(RuntimeError):
        with util.env(HVD_TEST_KEPT="during"):
            raise RuntimeError()
    assert os.environ["HVD_TEST_KEPT"] == "before"


def test_extension_available_answers_without_importing_the_framework():
    code = ("import sys\nfrom horovod.common.util import extension_available as a\n"
            "print(a('torch'), a('tensorflow'), a('mxnet'), 'torch' in sys.modules, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    have = [importlib.util.find_spec(m) is not None for m in ("horovod.torch", "horovod.tensorflow")]
    assert out[:2] == [str(h) for h in have]
    assert out[2:] == ["False", "False", "False"]
    with pytest.raises(ValueError, match="unknown extension"):
        util.extension_available("caffe")


def test_mpi_built_follows_the_mpi_library_on_path(tmp_path):
    code = "from horovod.common.util import mpi_built; print(mpi_built())"
    env = dict(os.environ, PATH=str(tmp_path), HVD_MPI_LIBRARY="")
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    env["HVD_MPI_LIBRARY"] = "/some/libmpi.so.40"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "True"


def test_version_names_the_horovod_api_level_and_hvd():
    from packaging.version import Version
    version = Version(horovod.__version__)
    assert version.public == horovod.HOROVOD_API_VERSION
    assert version.local == "hvd." + importlib.metadata.version("hvd-core")
    assert version >= Version("0.21.0") and version >= Version("0.28")  # integrations' gates
    # importlib.metadata-style lookups of "horovod" give the same answer.
    assert importlib.metadata.version("horovod") == horovod.__version__
    assert "hvd" in importlib.metadata.metadata("horovod")["Summary"]


def test_timeline_dynamic_starts_no_timeline_until_asked(tmp_path):
    ranks.run_program_ok(2, "compatibility:timeline_started_at_run_time", kwargs={"path": str(tmp_path / "later.json")},
                         env={"HOROVOD_TIMELINE": "DYNAMIC"}, cwd=str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["later.json"]
    assert "allreduce.during" in (tmp_path / "later.json").read_text()
