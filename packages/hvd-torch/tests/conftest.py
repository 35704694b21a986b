# conftest.py - makes this folder importable (torch_ranks.py); every test here
# runs real rank processes against the installed hvd-core and torch.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
