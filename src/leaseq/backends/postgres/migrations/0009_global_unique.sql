-- enqueue(..., unique_scope="global"): the key of a job enqueued with it, else NULL. A
-- job's row leaves the live table when it finishes, so the index makes the key unique
-- among live global-scope jobs of every queue, and frees it with no extra write.
ALTER TABLE {prefix}jobs ADD COLUMN global_key text;
CREATE UNIQUE INDEX {prefix}jobs_global_key ON {prefix}jobs (global_key)
    WHERE global_key IS NOT NULL;
