-- The last ended lease (issue 31, design §62): the token of the last lease of the job
-- that ended, and how (_core/ended.py: 'nack:scheduled', 'release:available',
-- 'bury:dead', 'expired', ...; 17 characters at most), written by the statement that
-- ends the lease and left alone by a claim. A nack, release or bury repeated by that
-- lease after its reply was lost finds it and returns what the first call returned.
-- Kept in history (archive copies it), so a repeat finds a job that a nack or release
-- cancelled. Nullable columns without a default, added last, both in one ALTER per
-- table: an instant change on MySQL 8.0.12+ and MariaDB 10.6 (a table copy on MySQL
-- 8.0.1-8.0.11) on tables that hold jobs. Rows written before read as NULL: a lease that
-- ended before this migration has nothing to repeat.
ALTER TABLE {prefix}jobs ADD COLUMN ended_token BIGINT NULL,
                         ADD COLUMN ended_as VARCHAR(24) NULL;
ALTER TABLE {prefix}history ADD COLUMN ended_token BIGINT NULL,
                            ADD COLUMN ended_as VARCHAR(24) NULL;
