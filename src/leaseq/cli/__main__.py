"""``python -m leaseq.cli``: the same as the ``leaseq`` command."""

from leaseq.cli import main

main()
