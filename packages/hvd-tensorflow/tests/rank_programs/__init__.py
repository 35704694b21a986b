# rank_programs - what each rank runs in hvd-tensorflow's multi-process tests:
# one module per test file (ops.py for test_ops.py, ...), each function one
# rank-side program, launched by name (op_ranks.run_program*, or conftest's
# tf_ranks.run_program_ok). A function returns what its test checks
# (reported as one JSON line); checklist.py runs many independent checks in
# one program, tensorflow_threads.py holds the thread limits every module
# sets. The names carry no test_ prefix, so pytest never collects them.
