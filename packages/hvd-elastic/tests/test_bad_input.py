"""Elastic flags that cannot work are refused at once, naming what is wrong, before any
worker starts."""

import pytest

from elastic_harness import base_env
from horovod.common import testing


def _horovodrun(tmp_path, *args):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    return testing.horovodrun(*[str(a).replace("DISCOVER", str(script)) for a in args], "true", env=base_env(),
                              timeout=30)


@pytest.mark.parametrize("args,match", [
    (["--mpi", "-np", 2, "--min-np", 1, "--host-discovery-script", "DISCOVER"],
     "elastic training runs on hvd's own transports and cannot be combined with --mpi"),
    (["-np", 1, "--min-np", 2, "--host-discovery-script", "DISCOVER"], "-np 1 is smaller than --min-np 2"),
    (["-np", 4, "--max-np", 2, "--host-discovery-script", "DISCOVER"], "--max-np 2 is smaller than -np 4"),
    (["-np", 2, "--host-discovery-script", "DISCOVER", "-H", "localhost:2"],
     "--host-discovery-script and -H/--hostfile are mutually exclusive"),
    (["--min-np", 1, "--host-discovery-script", "DISCOVER", "--blacklist-cooldown-range", 10, 5],
     "the upper limit 5 s is below the lower limit 10 s"),
    (["-np", 2, "--host-discovery-script", "DISCOVER", "--elastic-timeout", 0], "--elastic-timeout must be positive"),
    (["-np", 2, "--host-discovery-script", "DISCOVER", "--reset-limit", -1], "--reset-limit must be 0 or more"),
])
def test_bad_elastic_arguments(tmp_path, args, match):
    result = _horovodrun(tmp_path, *args)
    assert result.returncode == 2, result.stderr
    assert match in result.stderr, result.stderr
    assert result.stdout == ""
