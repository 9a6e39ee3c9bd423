-- Job headers (issue 12): a small map of strings that travels with a job (the trace
-- context, when leaseq.tracing is on), as the JSON text leaseq encoded. text, not jsonb:
-- nothing queries inside it, and text keeps it byte for byte at no parsing cost. A
-- nullable column without a default is a catalog change only: no table rewrite, and rows
-- written before read as NULL (no headers).
ALTER TABLE {prefix}jobs ADD COLUMN headers text;
ALTER TABLE {prefix}history ADD COLUMN headers text;
