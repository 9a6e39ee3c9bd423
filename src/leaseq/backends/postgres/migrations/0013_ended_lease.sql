-- The last ended lease (issue 31, design §62): the token of the last lease of the job
-- that ended, and how (_core/ended.py: 'nack:scheduled', 'release:available',
-- 'bury:dead', 'expired', ...), written by the statement that ends the lease and left
-- alone by a claim. A nack, release or bury repeated by that lease after its reply was
-- lost finds it and returns what the first call returned. Kept in history (archive
-- copies it), so a repeat finds a job that a nack or release cancelled. Nullable
-- columns without a default: a catalog change only, no table rewrite, on tables that
-- hold jobs. Rows written before read as NULL: a lease that ended before this migration
-- has nothing to repeat.
ALTER TABLE {prefix}jobs ADD COLUMN ended_token bigint, ADD COLUMN ended_as text;
ALTER TABLE {prefix}history ADD COLUMN ended_token bigint, ADD COLUMN ended_as text;
