"""``python -m mentored``: the command line of :mod:`mentored.demo.cli`."""

import sys

from .demo.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
