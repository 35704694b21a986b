"""scikit-build-core metadata provider: hvd-tensorflow's TensorFlow extras.

The ops in a hvd-tensorflow wheel are compiled against one TensorFlow release
and load only into that minor version. TensorFlow ships as two distributions
that own the same `tensorflow` package (`tensorflow`, and `tensorflow-cpu`
without the GPU pieces), and a requirement cannot say "either": a hard
`tensorflow` requirement would make pip install a second TensorFlow over a
user's tensorflow-cpu. So TensorFlow is not a plain requirement; the wheel
offers both as extras pinned to the minor it was built against:

    pip install hvd-tensorflow[tensorflow-cpu]   # tensorflow-cpu>=2.21,<2.22
    pip install hvd-tensorflow[tensorflow]       # tensorflow>=2.21,<2.22

and horovod.tensorflow refuses, at import, a TensorFlow other than the one
its ops were built against. When no TensorFlow can be imported (building the
sdist) the extras only state the oldest supported release.
"""
import os
import subprocess
import sys

OLDEST_TENSORFLOW = (2, 17)


def _installed_tensorflow():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        out = subprocess.run([sys.executable, "-c", "import tensorflow as tf; print(tf.__version__)"],
                             env=env, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    major, minor = out.stdout.strip().splitlines()[-1].split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()))


def _extras():
    release = _installed_tensorflow()
    if release is None:
        spec = ">=%d.%d" % OLDEST_TENSORFLOW
    else:
        spec = ">=%d.%d,<%d.%d" % (release + (release[0], release[1] + 1))
    return {
        "tensorflow": ["tensorflow" + spec],
        "tensorflow-cpu": ["tensorflow-cpu" + spec],
        "test": ["pytest>=7"],
    }


def dynamic_metadata(field, settings=None, project=None):
    if field != "optional-dependencies":
        raise RuntimeError("hvd_tf_metadata only provides optional-dependencies, not %s" % field)
    return _extras()
