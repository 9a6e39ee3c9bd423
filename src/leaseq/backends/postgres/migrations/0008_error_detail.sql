-- Errors as JSON (issue 24): the last error as the JSON object nack was given (a dict as
-- given, an exception as {"type", "message", "traceback"}), beside the readable text in
-- last_error/error; text, as headers, kept byte for byte. NULL when the text says it all:
-- rows written before read back as {"message": text}. A nullable column without a
-- default is a catalog change only, no table rewrite.
ALTER TABLE {prefix}jobs ADD COLUMN error_detail text;
ALTER TABLE {prefix}history ADD COLUMN error_detail text;

-- kick and peek(queue, 'dead') take dead jobs by priority, then oldest first: this index
-- holds them in that order (dead jobs only, so claims and acks never touch it).
CREATE INDEX {prefix}jobs_kick ON {prefix}jobs (queue, priority DESC, id) WHERE state = 'dead';
