-- Job tags (issue 31): labels to find a job by (jobs(tag=), leaseq jobs --tag, the
-- dashboard), as the compact JSON array of strings leaseq encoded (at most 16 tags of 64
-- characters: 1,090 bytes, so TEXT holds it), or NULL for none; kept in history as
-- headers are. A tag is found by its quoted text, checked row by row along the listing's
-- walk: no index, so enqueues and claims pay nothing for tags. A nullable column without
-- a default, added last: an instant change on MySQL 8.0.12+ and MariaDB 10.6; rows
-- written before read as NULL (no tags). The tables' utf8mb4_bin default applies, so the
-- match is exact. (0011 is taken by the job-id epoch table on another branch.)
ALTER TABLE {prefix}jobs ADD COLUMN tags TEXT NULL;
ALTER TABLE {prefix}history ADD COLUMN tags TEXT NULL;
