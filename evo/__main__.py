"""`python -m evo` runs the command line (same as the `evo` console script)."""

import sys

from evo.surface.cli import main

sys.exit(main())
