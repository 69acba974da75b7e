"""``python -m adloader``: the ``adloader`` command."""

import sys

from adloader.cli import main

sys.exit(main())
