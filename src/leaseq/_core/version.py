"""leaseq's version, where every layer may read it (``leaseq.__version__`` re-exports it)."""

VERSION = "0.1.0"
