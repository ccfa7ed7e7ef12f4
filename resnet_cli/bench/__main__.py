"""`python -m resnet_cli.bench`: one measurement in this fresh process (the job as JSON on stdin)."""

from . import _child_main

_child_main()
