-- Job headers (issue 12): a small map of strings that travels with a job (the trace
-- context, when leaseq.tracing is on), as the JSON text leaseq encoded. Rows written
-- before read as NULL (no headers).
ALTER TABLE {prefix}jobs ADD COLUMN headers TEXT;
ALTER TABLE {prefix}history ADD COLUMN headers TEXT;
