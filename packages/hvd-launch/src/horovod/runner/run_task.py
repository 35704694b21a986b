"""The worker side of ``horovod.run()``: fetch the function, call it, store the outcome.

Started by the launcher as ``python -m horovod.runner.run_task`` on every
rank, with the job's rendezvous variables in the environment.  The rank comes
from ``HOROVOD_RANK`` or, under mpirun, the MPI launcher's variables.  Exits 1
when the function raised, so the launcher stops the other ranks.
"""

import os
import sys
import traceback

from horovod.common.elastic_rendezvous import LeftElasticJob
from horovod.runner.run_api import FUNCTION_KEY, RESULT_KEY_PREFIX, RESULT_SIZE_KEY

_RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


def _rank() -> str:
    for name in _RANK_VARIABLES:
        if os.environ.get(name):
            return os.environ[name]
    raise RuntimeError("horovod.runner.run_task: no rank variable is set "
                       f"({', '.join(_RANK_VARIABLES)}); it must be started by horovod.run()")


def main() -> int:
    import cloudpickle
    from horovod.common.rendezvous import RendezvousClient

    _rank()  # fail early outside horovod.run()
    client = RendezvousClient(os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
                              int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]),
                              os.environ["HOROVOD_SECRET_KEY"], timeout=60)
    func, args, kwargs = cloudpickle.loads(client.get(FUNCTION_KEY))
    try:
        outcome = ("ok", func(*args, **kwargs))
        code = 0
    except LeftElasticJob:
        return 0  # the elastic driver left this worker out: it has no result
    except BaseException as e:  # SystemExit and KeyboardInterrupt are reported too.
        text = traceback.format_exc()
        sys.stderr.write(text)
        try:
            cloudpickle.dumps(e)
            outcome = ("error", e, text)
        except Exception:
            outcome = ("error", None, text)
        code = 1
    try:
        blob = cloudpickle.dumps(outcome)
    except Exception:
        text = traceback.format_exc()
        blob = cloudpickle.dumps(("error", None, f"the return value could not be pickled:\n{text}"))
        code = 1
    # Read now: in an elastic job the rank and size change with each reset,
    # and the results are those of the last round.
    client.set(RESULT_KEY_PREFIX + _rank(), blob)
    client.set(RESULT_SIZE_KEY, os.environ.get("HOROVOD_SIZE", "1"))
    return code


if __name__ == "__main__":
    sys.exit(main())
