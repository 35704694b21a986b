# rank_programs - what each rank runs in hvd-core's multi-process tests: one
# module per test file (collectives.py for test_collectives.py, ...), each
# function one rank-side program, launched by name through ranks.py. A
# function returns what the test checks (reported as one JSON line).
