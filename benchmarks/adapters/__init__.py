"""One module per benchmarked system; each exposes `adapters()`. See base.py."""
