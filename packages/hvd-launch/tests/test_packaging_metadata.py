# test_packaging_metadata.py - the packaging facts every hvd distribution
# shares stay in step: one version (the repository's VERSION file), sibling
# requirements within that minor release, LICENSE/NOTICE copies, SPDX license
# and the same Python floor. tools/sync_packaging.py rewrites them.
import pathlib
import subprocess
import sys

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGES = ["hvd-core", "hvd-launch", "hvd-torch", "hvd-tensorflow", "hvd-mxnet", "hvd-elastic"]
pytestmark = pytest.mark.skipif(not (ROOT / "VERSION").exists(), reason="not run from a checkout")


def test_sync_packaging_finds_nothing_out_of_date():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "sync_packaging.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("package", PACKAGES)
def test_pyproject_shares_version_license_and_python_floor(package):
    version = (ROOT / "VERSION").read_text().strip()
    major, minor = (int(x) for x in version.split(".")[:2])
    project = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]
    assert project["version"] == version
    assert project["license"] == "Apache-2.0"
    assert project["requires-python"] == ">=3.10"
    assert project["urls"]
    assert any(c.startswith("Programming Language :: Python :: 3.1") for c in project["classifiers"])
    wanted = ">=%d.%d,<%d.%d" % (major, minor, major, minor + 1)
    siblings = {"hvd-core"} if package == "hvd-launch" else {"hvd-core", "hvd-launch"}
    if package != "hvd-core":
        for sibling in siblings:
            assert sibling + wanted in project["dependencies"], (package, project["dependencies"])
