# test_horovod_distribution.py - hvd and Horovod both install the `horovod`
# import package; `import horovod` refuses to run when Horovod's own
# distribution is installed beside hvd, and says what to do. Each case
# imports horovod in a fresh interpreter with a fake site directory first on
# sys.path holding only a distribution record (no code).
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("horovod.common")


def _import_horovod(site_dir, **env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}
    env.pop("HVD_ALLOW_HOROVOD_DISTRIBUTION", None)
    env["PYTHONPATH"] = os.pathsep.join([str(site_dir)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", "import horovod; print(horovod.__version__)"],
                          env=env, capture_output=True, text=True, timeout=120)


def _fake_record(site_dir, folder, version):
    record = site_dir / folder
    record.mkdir(parents=True)
    (record / "METADATA").write_text(textwrap.dedent("""\
        Metadata-Version: 2.1
        Name: horovod
        Version: %s
        Summary: Distributed training framework
        """ % version))
    return record


def test_horovod_dist_info_beside_hvd_is_refused_with_a_way_out(tmp_path):
    _fake_record(tmp_path, "horovod-0.28.1.dist-info", "0.28.1")
    result = _import_horovod(tmp_path)
    assert result.returncode != 0, result.stdout
    message = result.stderr
    assert "ImportError" in message
    assert "Horovod 0.28.1 is installed (%s)" % tmp_path in message
    assert "pip uninstall -y horovod" in message
    assert "docs/migrating.md" in message
    assert "HVD_ALLOW_HOROVOD_DISTRIBUTION=1" in message


def test_an_editable_or_old_style_horovod_record_is_found_too(tmp_path):
    # `pip install -e` of Horovod's checkout and setup.py installs leave an egg-info.
    _fake_record(tmp_path, "horovod-0.27.0-py3.11.egg-info", "0.27.0")
    (tmp_path / "horovod-0.27.0-py3.11.egg-info" / "PKG-INFO").write_text(
        "Metadata-Version: 1.1\nName: horovod\nVersion: 0.27.0\n")
    result = _import_horovod(tmp_path)
    assert result.returncode != 0 and "Horovod 0.27.0 is installed" in result.stderr, result.stderr


def test_hvd_cores_own_horovod_record_is_not_mistaken_for_horovod(tmp_path):
    # hvd-core records the Horovod API level it provides as "horovod <api>+hvd.<version>".
    _fake_record(tmp_path, "horovod-0.28.1+hvd.9.9.9.dist-info", "0.28.1+hvd.9.9.9")
    result = _import_horovod(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "+hvd." in result.stdout


def test_the_refusal_can_be_overridden(tmp_path):
    _fake_record(tmp_path, "horovod-0.28.1.dist-info", "0.28.1")
    result = _import_horovod(tmp_path, HVD_ALLOW_HOROVOD_DISTRIBUTION="1")
    assert result.returncode == 0, result.stderr


def test_a_clean_environment_imports(tmp_path):
    result = _import_horovod(tmp_path)
    assert result.returncode == 0, result.stderr
