-- Job headers (issue 12): a small map of strings that travels with a job (the trace
-- context, when leaseq.tracing is on), as the JSON text leaseq encoded (at most 8 KiB, so
-- TEXT holds it). A nullable column without a default, added last: an instant change on
-- MySQL 8.0.12+ and MariaDB 10.6; rows written before read as NULL (no headers). The
-- tables' utf8mb4_bin default applies.
ALTER TABLE {prefix}jobs ADD COLUMN headers TEXT NULL;
ALTER TABLE {prefix}history ADD COLUMN headers TEXT NULL;
