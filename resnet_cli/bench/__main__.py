"""`python -m resnet_cli.bench`: one measurement in this fresh process (the job as JSON on stdin)."""

from .measure import child_main

child_main()
