-- enqueue(..., unique_scope="global"): the key of a job enqueued with it, else NULL (a
-- unique index admits any number of NULLs). A job's row leaves the live table when it
-- finishes, so the index makes the key unique among live global-scope jobs of every
-- queue, and frees it with no extra write.
ALTER TABLE {prefix}jobs
    ADD COLUMN global_key VARBINARY(1020) NULL,
    ADD UNIQUE KEY {prefix}jobs_global_key (global_key);
