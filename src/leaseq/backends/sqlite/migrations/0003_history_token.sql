-- The lease token that completed or ended the job: a retried ack under the same token is
-- recognised as already done.
ALTER TABLE {prefix}history ADD COLUMN lease_token INTEGER;
