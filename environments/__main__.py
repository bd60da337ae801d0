"""Entry point for `python -m environments` (see environments/cli.py)."""

import sys

from environments.cli import main

sys.exit(main())
