"""`python -m examples.pruning_trainer`: see `cli.py`."""

from examples.pruning_trainer.cli import main

raise SystemExit(main())
