"""``python -m distshap``: the ``distshap`` command line, where no console script is installed
(a source checkout on ``PYTHONPATH``, a virtual environment whose ``bin`` is not on ``PATH``)."""

import sys

from distshap.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
