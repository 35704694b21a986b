# conftest.py - makes this folder importable (mxnet_ranks.py); every test here
# runs real rank processes against the installed hvd-core and MXNet 1.9.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
