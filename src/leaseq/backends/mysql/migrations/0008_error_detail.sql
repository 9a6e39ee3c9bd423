-- Errors as JSON (issue 24): the last error as the JSON object nack was given (a dict as
-- given, an exception as {"type", "message", "traceback"}), beside the readable text in
-- last_error/error. MEDIUMTEXT as last_error: a traceback may pass TEXT's 64 KiB. A
-- nullable column without a default, added last: an instant change on MySQL 8.0.12+ and
-- MariaDB 10.6; rows written before read as NULL, then as {"message": text}.
-- kick and peek(queue, 'dead') take dead jobs by sort_priority, then id: the claim index
-- (queue, state, sort_priority, ...) already holds a queue's dead jobs by priority.
ALTER TABLE {prefix}jobs ADD COLUMN error_detail MEDIUMTEXT NULL;
ALTER TABLE {prefix}history ADD COLUMN error_detail MEDIUMTEXT NULL;
