"""`python -m benchmarks.scaling` (benchmarks.scaling.cli)."""

import sys

from benchmarks.scaling.cli import main

if __name__ == "__main__":
    sys.exit(main())
