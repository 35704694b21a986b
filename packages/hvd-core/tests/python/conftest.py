# conftest.py - makes tests/python importable (ranks.py) and skips nothing:
# every test here runs real processes against the installed hvd-core.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
