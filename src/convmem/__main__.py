"""``python -m convmem``: the same as the ``convmem`` command."""

import sys

from convmem.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
