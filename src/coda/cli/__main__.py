"""``python -m coda.cli``: the ``coda`` command, as coda.cli.node_commands starts its agent."""

import sys

from coda.cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
