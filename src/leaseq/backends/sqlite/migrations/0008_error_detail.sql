-- Errors as JSON (issue 24): the last error as the JSON object nack was given (a dict as
-- given, an exception as {"type", "message", "traceback"}), beside the readable text in
-- last_error/error. NULL when the text says it all: rows written before read back as
-- {"message": text}, so nothing needs rewriting.
ALTER TABLE {prefix}jobs ADD COLUMN error_detail TEXT;
ALTER TABLE {prefix}history ADD COLUMN error_detail TEXT;

-- kick and peek(queue, "dead") take dead jobs by priority, then oldest first: this index
-- holds them in that order (dead jobs only, so claims and acks never touch it).
CREATE INDEX {prefix}jobs_kick ON {prefix}jobs (queue, priority DESC, id) WHERE state = 'dead';
