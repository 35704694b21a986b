"""``python -m horovod.runner`` is ``horovodrun``."""

from horovod.runner.launch import main

main()
