"""Pure logic with no I/O: job records, validation, backoff, settings."""
