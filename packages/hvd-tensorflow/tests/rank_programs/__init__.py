# rank_programs - what each rank runs in hvd-tensorflow's multi-process tests:
# one module per test file (ops.py for test_ops.py, ...), each function one
# rank-side program, launched by name (op_ranks.run_program*). A function
# returns what its test checks (reported as one JSON line). The names carry
# no test_ prefix, so pytest never collects them.
