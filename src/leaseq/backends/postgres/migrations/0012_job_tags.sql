-- Job tags (issue 31): labels to find a job by (jobs(tag=), leaseq jobs --tag, the
-- dashboard), as the compact JSON array of strings leaseq encoded, or NULL for none; kept
-- in history as headers are. text, not jsonb: stored and read back byte for byte, and a
-- tag (A-Z a-z 0-9 _ . : -, no quote) is found by its quoted text, "tag", checked row by
-- row along the listing's walk: no index, so enqueues and claims pay nothing for tags.
-- A nullable column without a default is a catalog change only, no table rewrite.
-- (0011 is taken by the job-id epoch table on another branch.)
ALTER TABLE {prefix}jobs ADD COLUMN tags text;
ALTER TABLE {prefix}history ADD COLUMN tags text;
