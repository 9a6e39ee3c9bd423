-- Job tags (issue 31): labels to find a job by (jobs(tag=), leaseq jobs --tag, the
-- dashboard), as the compact JSON array of strings leaseq encoded, or NULL for none; kept
-- in history as headers are. A tag is found by its quoted text, checked row by row along
-- the listing's walk: no index, so enqueues and claims pay nothing for tags. Rows written
-- before read as NULL (no tags). (0011 is taken by the job-id epoch table on another
-- branch.)
ALTER TABLE {prefix}jobs ADD COLUMN tags TEXT;
ALTER TABLE {prefix}history ADD COLUMN tags TEXT;
