-- The lease token that completed or ended the job: a retried ack under the same token
-- (its first reply lost with a dropped connection) is recognised as already done.
ALTER TABLE {prefix}history ADD COLUMN lease_token bigint;
