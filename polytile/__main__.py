"""``python -m polytile``: the command line (see :mod:`polytile.cli`)."""

import sys

from polytile.cli import main

sys.exit(main())
