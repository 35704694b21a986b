# constants.py - messages of the elastic driver that callers match on.
"""Messages of the elastic driver (Horovod's wording where its tests and users match on it)."""

# Horovod's wording (its integration tests look for it): the job ended
# because more resets were needed than --reset-limit allows.
RESET_LIMIT_EXCEEDED_MESSAGE = 'Horovod was shutdown because number of resets during elastic job exceeded limit: {}'

# Horovod's wording for a job that ended because workers failed, kept as the
# start of hvd's longer message.
WORKERS_FAILED_MESSAGE = 'Horovod detected that one or more processes exited with non-zero status'
