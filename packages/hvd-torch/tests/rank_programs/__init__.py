# rank_programs - what each rank runs in hvd-torch's multi-process tests: one
# module per test file (errors.py for test_errors.py, ...), each function one
# rank-side program, launched by name through torch_ranks.run_program*. A
# function returns what its test checks (reported as one JSON line). The
# names carry no test_ prefix, so pytest never collects them.
