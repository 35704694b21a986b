# config_parser.py - Horovod's horovod.runner.common.util.config_parser: apply
# a parsed config file to launcher arguments, and launcher arguments to the
# HOROVOD_* environment, over hvd's config_file and tuning_flags tables.
"""Config-file values onto launcher arguments, and arguments onto the environment."""

from horovod.runner.config_file import values_from_document
from horovod.runner.tuning_flags import TUNING_FLAGS, tuning_env

__all__ = ["set_args_from_config", "set_env_from_args"]


def set_args_from_config(args, config, override_args):
    """Sets on `args` every option the parsed YAML document `config` names, except those
    in `override_args` (the names given on the command line)."""
    for name, value in values_from_document(config, "config").items():
        if name not in override_args:
            setattr(args, name, value)


def set_env_from_args(env, args):
    """Adds to `env` (a dict) the HOROVOD_* variables for the tuning options set on `args`."""
    env.update(tuning_env({flag.dest: getattr(args, flag.dest, None) for flag in TUNING_FLAGS}))
    return env
