"""The engine knobs ``horovodrun`` accepts as flags, config-file keys and HOROVOD_* variables.

One table drives the command line, the config file and the worker
environment, so a knob cannot be added to one and forgotten in another.
"""

import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple


def _bool_env(value: Any) -> str:
    return "1" if value else "0"


def _mb_to_bytes(value: Any) -> str:
    # Horovod's flag is in MB but the engine's variable is in bytes.
    return str(int(float(value) * 1024 * 1024))


@dataclasses.dataclass(frozen=True)
class TuningFlag:
    """One engine knob: its flag, the variable the worker reads, and its config-file key."""

    flag: str
    dest: str
    kind: type  # int, float, str or bool (bool flags take no value)
    env_var: str
    config_key: Tuple[str, str]
    help: str
    to_env: Callable[[Any], str] = str
    # For "disable" flags whose config-file key is the positive "enabled".
    config_inverted: bool = False
    # More spellings that set the same value (bool flags: True), and Horovod's
    # spellings that set a bool flag to False (--no-..., --stall-check).
    aliases: Tuple[str, ...] = ()
    negations: Tuple[str, ...] = ()


TUNING_FLAGS = (
    TuningFlag("--fusion-threshold-mb", "fusion_threshold_mb", float, "HOROVOD_FUSION_THRESHOLD",
               ("params", "fusion_threshold_mb"),
               "Fusion buffer threshold in MB: tensors are fused into one collective up to "
               "this size (default 128; 0 disables fusion).", _mb_to_bytes),
    TuningFlag("--cycle-time-ms", "cycle_time_ms", float, "HOROVOD_CYCLE_TIME",
               ("params", "cycle_time_ms"),
               "Longest time in ms the engine waits to batch more tensors into one cycle "
               "(default 1)."),
    TuningFlag("--cache-capacity", "cache_capacity", int, "HOROVOD_CACHE_CAPACITY",
               ("params", "cache_capacity"),
               "Number of entries in the response cache (default 1024; 0 disables it)."),
    TuningFlag("--hierarchical-allreduce", "hierarchical_allreduce", bool,
               "HOROVOD_HIERARCHICAL_ALLREDUCE", ("params", "hierarchical_allreduce"),
               "Reduce within each host first, then across hosts (hvd's default when the job spans "
               "hosts).", _bool_env, negations=("--no-hierarchical-allreduce",)),
    TuningFlag("--hierarchical-allgather", "hierarchical_allgather", bool,
               "HOROVOD_HIERARCHICAL_ALLGATHER", ("params", "hierarchical_allgather"),
               "Gather across hosts first, then within each host (hvd's default when the job spans "
               "hosts).", _bool_env,
               negations=("--no-hierarchical-allgather",)),
    TuningFlag("--torus-allreduce", "torus_allreduce", bool, "HOROVOD_TORUS_ALLREDUCE",
               ("params", "torus_allreduce"),
               "2D torus allreduce over NCCL (no effect in hvd: NCCL picks its own algorithms across hosts).",
               _bool_env,
               negations=("--no-torus-allreduce",)),
    TuningFlag("--autotune", "autotune", bool, "HOROVOD_AUTOTUNE", ("autotune", "enabled"),
               "Tune the fusion threshold, the cycle time, the response cache and, across hosts, the "
               "hierarchical modes while training (rank 0 searches; knobs set explicitly stay as set).",
               _bool_env, negations=("--no-autotune",)),
    TuningFlag("--autotune-log-file", "autotune_log_file", str, "HOROVOD_AUTOTUNE_LOG",
               ("autotune", "log_file"), "CSV file the autotuner logs its samples to."),
    TuningFlag("--autotune-warmup-samples", "autotune_warmup_samples", int,
               "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", ("autotune", "warmup_samples"),
               "Samples discarded before autotuning starts (default 3)."),
    TuningFlag("--autotune-steps-per-sample", "autotune_steps_per_sample", int,
               "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", ("autotune", "steps_per_sample"),
               "Steps per autotune sample (default 10)."),
    TuningFlag("--autotune-bayes-opt-max-samples", "autotune_bayes_opt_max_samples", int,
               "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", ("autotune", "bayes_opt_max_samples"),
               "Most samples Bayesian optimisation takes (default 20)."),
    TuningFlag("--autotune-gaussian-process-noise", "autotune_gaussian_process_noise", float,
               "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
               ("autotune", "gaussian_process_noise"),
               "Noise regularisation of the autotuner's Gaussian process (default 0.8)."),
    TuningFlag("--timeline-filename", "timeline_filename", str, "HOROVOD_TIMELINE",
               ("timeline", "filename"),
               "Write a Chrome-trace timeline of engine activity to this file."),
    TuningFlag("--timeline-mark-cycles", "timeline_mark_cycles", bool,
               "HOROVOD_TIMELINE_MARK_CYCLES", ("timeline", "mark_cycles"),
               "Mark each engine cycle in the timeline.", _bool_env,
               negations=("--no-timeline-mark-cycles",)),
    TuningFlag("--no-stall-check", "no_stall_check", bool, "HOROVOD_STALL_CHECK_DISABLE",
               ("stall_check", "enabled"),
               "Disable the check for ranks that fall behind submitting tensors.", _bool_env,
               config_inverted=True, negations=("--stall-check",)),
    TuningFlag("--stall-check-warning-time-seconds", "stall_check_warning_time_seconds", int,
               "HOROVOD_STALL_CHECK_TIME_SECONDS", ("stall_check", "warning_time_seconds"),
               "Seconds before a stalled tensor is reported (default 60)."),
    TuningFlag("--stall-check-shutdown-time-seconds", "stall_check_shutdown_time_seconds", int,
               "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", ("stall_check", "shutdown_time_seconds"),
               "Seconds a tensor may stall before the job is shut down (default 0: never)."),
    TuningFlag("--mpi-threads-disable", "mpi_threads_disable", bool,
               "HOROVOD_MPI_THREADS_DISABLE", ("library_options", "mpi_threads_disable"),
               "Do not request MPI_THREAD_MULTIPLE (no effect in hvd: its MPI data plane needs it).",
               _bool_env, negations=("--no-mpi-threads-disable",)),
    TuningFlag("--num-nccl-streams", "num_nccl_streams", int, "HOROVOD_NUM_NCCL_STREAMS",
               ("library_options", "num_nccl_streams"),
               "NCCL streams per device (no effect in hvd: one CUDA stream per process set)."),
    TuningFlag("--thread-affinity", "thread_affinity", str, "HOROVOD_THREAD_AFFINITY",
               ("library_options", "thread_affinity"),
               "CPU core(s) to pin each local rank's background thread to, "
               "comma-separated by local rank."),
    TuningFlag("--ccl-bgt-affinity", "ccl_bgt_affinity", int, "HOROVOD_CCL_BGT_AFFINITY",
               ("library_options", "ccl_bgt_affinity"),
               "CPU core for the oneCCL background thread (no effect in hvd: no oneCCL)."),
    TuningFlag("--gloo-timeout-seconds", "gloo_timeout_seconds", int,
               "HOROVOD_GLOO_TIMEOUT_SECONDS", ("library_options", "gloo_timeout_seconds"),
               "Seconds start-up waits for the rendezvous store and for peers to connect "
               "(default 30; a failed peer is noticed within HOROVOD_PEER_TIMEOUT_SECONDS)."),
    TuningFlag("--log-level", "log_level", str, "HOROVOD_LOG_LEVEL", ("logging", "level"),
               "Engine log level: TRACE, DEBUG, INFO, WARNING, ERROR or FATAL."),
    TuningFlag("--log-hide-timestamp", "log_hide_timestamp", bool, "HOROVOD_LOG_HIDE_TIME",
               ("logging", "with_timestamp"),
               "Leave the timestamp out of engine log lines.", _bool_env, config_inverted=True,
               aliases=("--log-without-timestamp",),
               negations=("--log-with-timestamp", "--no-log-hide-timestamp")),
)

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")

TUNING_FLAGS_BY_DEST: Dict[str, TuningFlag] = {f.dest: f for f in TUNING_FLAGS}


def tuning_env(values: Dict[str, Optional[Any]]) -> Dict[str, str]:
    """Returns the HOROVOD_* variables for the knobs that are set in ``values`` (by dest)."""
    env = {}
    for flag in TUNING_FLAGS:
        value = values.get(flag.dest)
        if value is None:
            continue
        # Unset (None) leaves the engine default, and any HOROVOD_* the caller
        # exported, alone; a bool set either way (--x / --no-x) is passed on.
        env[flag.env_var] = flag.to_env(value)
    return env
