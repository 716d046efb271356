"""``python -m coda``: the same command line as the ``coda`` script."""

from coda.cli import main

main()
