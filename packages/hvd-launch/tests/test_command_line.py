"""horovodrun's flags: environment mirrors, config file, and the HOROVOD_* variables they set."""

import pytest

from horovod.runner.config_file import load_config_file
from horovod.runner.errors import BadInputError
from horovod.runner.launch import build_parser, resolve_args, settings_from_args
from horovod.runner.tuning_flags import TUNING_FLAGS, tuning_env


def _resolve(argv, environ=None):
    return resolve_args(build_parser(), argv, environ or {})


def test_command_keeps_its_own_flags():
    args = _resolve(["-np", "2", "python", "train.py", "--lr", "0.1", "-H", "x"])
    assert args.num_proc == 2
    assert args.command == ["python", "train.py", "--lr", "0.1", "-H", "x"]
    assert args.hosts is None


def test_double_dash_before_command_is_dropped():
    assert _resolve(["-np", "1", "--", "echo", "hi"]).command == ["echo", "hi"]


def test_every_flag_has_an_environment_mirror():
    args = _resolve(["echo"], {"HVDRUN_NUM_PROC": "3", "HVDRUN_HOSTS": "a:2,b:1",
                               "HVDRUN_MPI": "yes", "HVDRUN_FUSION_THRESHOLD_MB": "16",
                               "HVDRUN_AUTOTUNE": "1", "HVDRUN_LOG_LEVEL": "debug",
                               "HVDRUN_COOLDOWN_RANGE": "10 100"})
    assert (args.num_proc, args.hosts, args.use_mpi) == (3, "a:2,b:1", True)
    assert args.fusion_threshold_mb == 16.0 and args.autotune is True
    assert args.log_level == "DEBUG"
    assert args.cooldown_range == [10, 100]


def test_help_names_each_mirror():
    text = build_parser().format_help()
    for flag in TUNING_FLAGS:
        assert flag.env_var in text
        assert "HVDRUN_" + flag.dest.upper() in text
    assert "HVDRUN_NUM_PROC" in text and "HOROVOD_START_TIMEOUT" in text


def test_command_line_wins_over_environment():
    assert _resolve(["-np", "2", "echo"], {"HVDRUN_NUM_PROC": "5"}).num_proc == 2


def test_horovod_variables_are_read_for_start_timeout_and_interfaces():
    args = _resolve(["echo"], {"HOROVOD_START_TIMEOUT": "7", "HOROVOD_GLOO_IFACE": "lo"})
    assert args.start_timeout == 7.0 and args.network_interfaces == "lo"


@pytest.mark.parametrize("name,value", [("HVDRUN_NUM_PROC", "two"), ("HVDRUN_MPI", "maybe"),
                                        ("HVDRUN_LOG_LEVEL", "LOUD")])
def test_bad_environment_values_are_rejected_by_name(name, value):
    with pytest.raises(BadInputError, match=name):
        _resolve(["echo"], {name: value})


def test_tuning_flags_map_to_horovod_variables():
    args = _resolve(["--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5", "--cache-capacity", "0",
                     "--hierarchical-allreduce", "--hierarchical-allgather", "--autotune",
                     "--autotune-log-file", "at.csv", "--autotune-warmup-samples", "4",
                     "--autotune-steps-per-sample", "5", "--autotune-bayes-opt-max-samples", "6",
                     "--autotune-gaussian-process-noise", "0.5", "--timeline-filename", "tl.json",
                     "--timeline-mark-cycles", "--no-stall-check",
                     "--stall-check-warning-time-seconds", "30",
                     "--stall-check-shutdown-time-seconds", "90", "--thread-affinity", "0,1",
                     "--gloo-timeout-seconds", "12", "--log-level", "info", "-np", "1", "echo"])
    settings = settings_from_args(args)
    assert tuning_env(settings.tuning) == {
        "HOROVOD_FUSION_THRESHOLD": str(32 * 1024 * 1024),
        "HOROVOD_CYCLE_TIME": "2.5",
        "HOROVOD_CACHE_CAPACITY": "0",
        "HOROVOD_HIERARCHICAL_ALLREDUCE": "1",
        "HOROVOD_HIERARCHICAL_ALLGATHER": "1",
        "HOROVOD_AUTOTUNE": "1",
        "HOROVOD_AUTOTUNE_LOG": "at.csv",
        "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "4",
        "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "5",
        "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "6",
        "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "0.5",
        "HOROVOD_TIMELINE": "tl.json",
        "HOROVOD_TIMELINE_MARK_CYCLES": "1",
        "HOROVOD_STALL_CHECK_DISABLE": "1",
        "HOROVOD_STALL_CHECK_TIME_SECONDS": "30",
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "90",
        "HOROVOD_THREAD_AFFINITY": "0,1",
        "HOROVOD_GLOO_TIMEOUT_SECONDS": "12",
        "HOROVOD_LOG_LEVEL": "INFO",
    }


# Every flag of Horovod's horovodrun (0.28), with a value where it takes one.
HOROVOD_FLAGS = [
    ["-v"], ["-np", "2"], ["-cb"], ["--disable-cache"], ["--start-timeout", "5"], ["--network-interface", "lo"],
    ["--output-filename", "out"], ["--verbose"], ["--config-file", None], ["-p", "22"], ["-i", None],
    ["--tcp"], ["--binding-args", "x"], ["--fusion-threshold-mb", "1"], ["--cycle-time-ms", "1"],
    ["--cache-capacity", "1"], ["--hierarchical-allreduce"], ["--no-hierarchical-allreduce"],
    ["--hierarchical-allgather"], ["--no-hierarchical-allgather"], ["--torus-allreduce"], ["--no-torus-allreduce"],
    ["--autotune"], ["--no-autotune"], ["--autotune-log-file", "f"], ["--autotune-warmup-samples", "1"],
    ["--autotune-steps-per-sample", "1"], ["--autotune-bayes-opt-max-samples", "1"],
    ["--autotune-gaussian-process-noise", "0.1"], ["--min-np", "1"], ["--max-np", "2"], ["--slots-per-host", "1"],
    ["--elastic-timeout", "1"], ["--reset-limit", "1"], ["--blacklist-cooldown-range", "1", "2"],
    ["--timeline-filename", "t"], ["--timeline-mark-cycles"], ["--no-timeline-mark-cycles"], ["--no-stall-check"],
    ["--stall-check"], ["--stall-check-warning-time-seconds", "1"], ["--stall-check-shutdown-time-seconds", "1"],
    ["--mpi-threads-disable"], ["--no-mpi-threads-disable"], ["--num-nccl-streams", "1"],
    ["--thread-affinity", "0"], ["--gloo-timeout-seconds", "1"], ["--log-level", "INFO"], ["--log-with-timestamp"],
    ["--log-without-timestamp"], ["-prefix-timestamp"], ["--prefix-output-with-timestamp"],
    ["--log-hide-timestamp"], ["--no-log-hide-timestamp"], ["-H", "a:1"], ["-hostfile", None],
    ["--host-discovery-script", "d"], ["--mpi-args", "x"], ["--gloo"], ["--mpi"], ["--jsrun"],
]


@pytest.mark.parametrize("flag", HOROVOD_FLAGS, ids=lambda f: f[0])
def test_every_horovod_flag_is_accepted(flag, tmp_path):
    path = tmp_path / "file"
    path.write_text("")  # for flags that name a file (an empty config file, host file, key)
    argv = [str(path) if part is None else part for part in flag]
    args = _resolve(argv + ["echo"])
    assert args.command == ["echo"]


@pytest.mark.parametrize("argv,variable,value", [
    (["--no-hierarchical-allreduce"], "HOROVOD_HIERARCHICAL_ALLREDUCE", "0"),
    (["--no-hierarchical-allgather"], "HOROVOD_HIERARCHICAL_ALLGATHER", "0"),
    (["--torus-allreduce"], "HOROVOD_TORUS_ALLREDUCE", "1"),
    (["--no-torus-allreduce"], "HOROVOD_TORUS_ALLREDUCE", "0"),
    (["--no-autotune"], "HOROVOD_AUTOTUNE", "0"),
    (["--no-timeline-mark-cycles"], "HOROVOD_TIMELINE_MARK_CYCLES", "0"),
    (["--stall-check"], "HOROVOD_STALL_CHECK_DISABLE", "0"),
    (["--no-mpi-threads-disable"], "HOROVOD_MPI_THREADS_DISABLE", "0"),
    (["--log-without-timestamp"], "HOROVOD_LOG_HIDE_TIME", "1"),
    (["--log-hide-timestamp"], "HOROVOD_LOG_HIDE_TIME", "1"),
    (["--log-with-timestamp"], "HOROVOD_LOG_HIDE_TIME", "0"),
    (["--no-log-hide-timestamp"], "HOROVOD_LOG_HIDE_TIME", "0"),
])
def test_negated_and_alias_flags_set_the_variable_either_way(argv, variable, value):
    assert tuning_env(settings_from_args(_resolve(argv + ["-np", "1", "echo"])).tuning) == {variable: value}


def test_a_flag_and_its_negation_are_mutually_exclusive(capsys):
    with pytest.raises(SystemExit):
        _resolve(["--autotune", "--no-autotune", "echo"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_launcher_flags_without_effect_say_so(capsys):
    from horovod.runner.launch import _inert_flag_notices
    notices = _inert_flag_notices(_resolve(["--jsrun", "--disable-cache", "echo"]))
    assert len(notices) == 2
    assert notices[0].startswith("--jsrun has no effect") and notices[1].startswith("--disable-cache has no effect")
    assert _inert_flag_notices(_resolve(["--gloo", "echo"])) == []


def test_config_file_controller_and_timestamp_keys_set_options_and_other_controllers_are_refused(tmp_path):
    path = tmp_path / "hvd.yaml"
    path.write_text("controller: mpi\nlogging:\n  with_timestamp: false\n")
    assert load_config_file(str(path)) == {"use_mpi": True, "log_hide_timestamp": True}
    path.write_text("controller: ccl\n")
    with pytest.raises(BadInputError, match="controller must be gloo or mpi"):
        load_config_file(str(path))


def test_unset_flags_set_no_variables():
    assert tuning_env(settings_from_args(_resolve(["-np", "1", "echo"])).tuning) == {}


CONFIG = """
params:
  fusion_threshold_mb: 8
  cycle_time_ms: 3
  hierarchical_allreduce: true
autotune:
  enabled: true
timeline:
  filename: /tmp/timeline.json
  mark_cycles: yes
stall_check:
  enabled: false
  warning_time_seconds: 45
library_options:
  gloo_timeout_seconds: 20
logging:
  level: WARNING
"""


def test_config_file_sets_knobs(tmp_path):
    path = tmp_path / "hvd.yaml"
    path.write_text(CONFIG)
    assert load_config_file(str(path)) == {
        "fusion_threshold_mb": 8.0, "cycle_time_ms": 3.0, "hierarchical_allreduce": True,
        "autotune": True, "timeline_filename": "/tmp/timeline.json", "timeline_mark_cycles": True,
        "no_stall_check": True, "stall_check_warning_time_seconds": 45,
        "gloo_timeout_seconds": 20, "log_level": "WARNING"}


def test_command_line_wins_over_config_file_which_wins_over_environment(tmp_path):
    path = tmp_path / "hvd.yaml"
    path.write_text(CONFIG)
    args = _resolve(["--config-file", str(path), "--cycle-time-ms", "9", "echo"],
                    {"HVDRUN_CYCLE_TIME_MS": "7", "HVDRUN_FUSION_THRESHOLD_MB": "1",
                     "HVDRUN_CACHE_CAPACITY": "5"})
    assert args.cycle_time_ms == 9.0
    assert args.fusion_threshold_mb == 8.0
    assert args.cache_capacity == 5


@pytest.mark.parametrize("text,match", [
    ("params: [1, 2\n", "not valid YAML"),
    ("- a\n- b\n", "mapping of sections"),
    ("tuning:\n  x: 1\n", "unknown section 'tuning'"),
    ("params:\n  fusion_mb: 1\n", "params.fusion_mb is not a known key"),
    ("params:\n  cache_capacity: many\n", "expected a int"),
    ("autotune:\n  enabled: 3\n", "expected true or false"),
])
def test_bad_config_files_are_rejected_naming_the_problem(tmp_path, text, match):
    path = tmp_path / "hvd.yaml"
    path.write_text(text)
    with pytest.raises(BadInputError, match=match):
        load_config_file(str(path))


def test_missing_config_file_is_reported(tmp_path):
    with pytest.raises(BadInputError, match="cannot read config file"):
        load_config_file(str(tmp_path / "absent.yaml"))


def test_hosts_default_to_localhost_and_np_to_total_slots():
    settings = settings_from_args(_resolve(["-np", "3", "echo"]))
    assert [(h.hostname, h.slots) for h in settings.hosts] == [("localhost", 3)]
    assert settings_from_args(_resolve(["-H", "a:2,b:3", "echo"])).num_proc == 5


def test_max_np_alone_leaves_the_job_static(capsys):
    # As in Horovod, only --host-discovery-script or --min-np make a job elastic.
    from horovod.runner.launch import _elastic_requested, _inert_flag_notices
    args = _resolve(["--max-np", "4", "-np", "2", "echo"])
    assert not _elastic_requested(args)
    assert _inert_flag_notices(args) == ["--max-np has no effect: the job is not elastic (that takes --min-np or "
                                         "--host-discovery-script)"]
    assert _elastic_requested(_resolve(["--min-np", "1", "-np", "2", "echo"]))
