"""Benchmarks of leaseq against its peers: see benchmarks/README.md."""
