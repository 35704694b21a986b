"""ElasticSampler under the real driver: after a host leaves mid-epoch, the survivors
share out what is left of the epoch - every sample is trained once, none twice."""

import collections
import os

from elastic_harness import HERE, Job, assert_no_worker_left, local_hosts


def test_every_sample_trained_once_when_a_host_leaves_mid_epoch(tmp_path):
    hosts = [h + ":1" for h in local_hosts(2)]
    job = Job(tmp_path, hosts=hosts, script=os.path.join(HERE, "sampler_train.py"))
    job.run("-np", 2, "--min-np", 1, train_args=["--hosts-file", job.hosts_file, "--remaining-hosts", hosts[0]])
    assert job.result.returncode == 0, job.describe()
    batches = job.events()
    assert {b["size"] for b in batches} == {1, 2}, batches  # the host left mid-epoch
    counts = collections.Counter(s for b in batches for s in b["samples"])
    assert sorted(counts) == list(range(64))
    assert set(counts.values()) == {1}, [s for s, n in counts.items() if n > 1]
    assert_no_worker_left(job)
