"""``--config-file``: engine knobs from a YAML file with Horovod's sections.

Example::

    params:
      fusion_threshold_mb: 32
      cycle_time_ms: 2
      cache_capacity: 2048
      hierarchical_allreduce: false
    autotune:
      enabled: true
      log_file: autotune.csv
    timeline:
      filename: timeline.json
      mark_cycles: true
    stall_check:
      enabled: true
      warning_time_seconds: 120
    library_options:
      gloo_timeout_seconds: 30
    logging:
      level: INFO
      with_timestamp: true
    controller: gloo

A flag given on the command line wins over the file.
"""

from typing import Any, Dict

from horovod.runner.errors import BadInputError
from horovod.runner.tuning_flags import TUNING_FLAGS

# Elastic keys are accepted so one file serves hvd-elastic too; they map to
# the elastic flags, which error out unless hvd-elastic is installed.
_ELASTIC_KEYS = {"reset_limit": "reset_limit", "cooldown_range": "cooldown_range"}


def _coerce(value: Any, kind: type, where: str) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise BadInputError(f"{where}: expected true or false, got {value!r}")
    if isinstance(value, bool):
        raise BadInputError(f"{where}: expected a {kind.__name__}, got {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise BadInputError(f"{where}: expected a {kind.__name__}, got {value!r}") from None


def load_config_file(path: str) -> Dict[str, Any]:
    """Reads ``path`` and returns the flag values it sets, keyed by argparse dest.

    Raises:
        BadInputError: the file cannot be read, is not YAML, or has an unknown
            section, an unknown key or a value of the wrong type.
    """
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is a declared dependency
        raise BadInputError("--config-file needs PyYAML: pip install pyyaml") from None
    try:
        with open(path, encoding="utf-8") as f:
            document = yaml.safe_load(f)
    except OSError as e:
        raise BadInputError(f"cannot read config file {path!r}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise BadInputError(f"config file {path!r} is not valid YAML: {e}") from None
    return values_from_document(document, f"config file {path!r}")


def values_from_document(document: Any, where: str) -> Dict[str, Any]:
    """The flag values a parsed config document sets, keyed by argparse dest; `where`
    names the document in error messages.

    Raises:
        BadInputError: an unknown section or key, or a value of the wrong type.
    """
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise BadInputError(f"{where} must be a mapping of sections")

    by_key = {flag.config_key: flag for flag in TUNING_FLAGS}
    sections = {section for section, _ in by_key} | {"elastic", "controller"}
    values: Dict[str, Any] = {}
    for section, body in document.items():
        if section == "controller":  # a value, not a section: gloo or mpi
            if not isinstance(body, str) or body.lower() not in ("gloo", "mpi"):
                raise BadInputError(f"{where}: controller must be gloo or mpi, got {body!r}")
            values["use_" + body.lower()] = True
            continue
        if section not in sections:
            raise BadInputError(
                f"{where}: unknown section {section!r}; known sections are "
                f"{', '.join(sorted(sections))}")
        if body is None:
            continue
        if not isinstance(body, dict):
            raise BadInputError(f"{where}: section {section!r} must be a mapping")
        for key, value in body.items():
            place = f"{where}: {section}.{key}"
            if section == "elastic":
                if key not in _ELASTIC_KEYS:
                    raise BadInputError(f"{place} is not a known key")
                values[_ELASTIC_KEYS[key]] = value
                continue
            flag = by_key.get((section, key))
            if flag is None:
                known = sorted(k for s, k in by_key if s == section)
                raise BadInputError(f"{place} is not a known key; section {section!r} takes "
                                    f"{', '.join(known)}")
            coerced = _coerce(value, flag.kind, place)
            if flag.config_inverted:
                coerced = not coerced
            values[flag.dest] = coerced
    return values
