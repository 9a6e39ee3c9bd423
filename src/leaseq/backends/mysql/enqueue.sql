-- {prefix}enqueue_with and {prefix}enqueue: leaseq's enqueue as stored procedures, for
-- triggers and for producers in any language (docs/enqueue-from-sql-and-http.md).
-- `migrate` installs both and replaces them whenever this text changes (mysql driver,
-- install_routine); each procedure's COMMENT holds the fingerprint of the text installed.
-- The two statements are separated by a line holding only //, as the mysql client's
-- DELIMITER // reads them (leaseq schema prints them so).
--
--   CALL {prefix}enqueue_with(queue, payload, options, @id);
--   CALL {prefix}enqueue_with('emails', '{"to": "a@example.com"}',
--                             '{"kind": "send", "priority": 5, "tags": ["billing", "eu"]}', @id);
--
-- options is a JSON object (NULL or '{}': every default) holding any of the enqueue
-- options by their Python names: kind (string), priority (integer, 0), delay (seconds, 0),
-- unique_key (string), max_attempts (integer) and tags (an array of strings). A key it
-- does not know is refused, not ignored. MySQL procedures have neither argument defaults
-- nor overloads, so a new argument would break every CALL: every option from now on is
-- added here, as a key of options (declared in leaseq/_core/options.py), and the
-- signature of both procedures stays as it is.
--
-- {prefix}enqueue(queue, payload, kind, priority, delay_seconds, unique_key,
-- max_attempts, @id) is the procedure of before, frozen: it passes its arguments to
-- {prefix}enqueue_with as an options object, so the body lives once. Every argument is
-- given (NULL for kind, unique_key, max_attempts; 0 for priority and delay).
--
-- The id comes back in the OUT argument (a result set would be refused inside a
-- trigger): the new job's, or with a unique_key a live job holds already, that job's
-- (nothing written, as the client's created=False).
--
-- The INSERTs are the client's own statements ({query:...}, with their :parameters
-- replaced by this procedure's variables, driver.routine_params); the checks repeat
-- leaseq._core.validate with its limits, and tests/test_sql_enqueue.py compares the
-- procedure with the client on the same inputs. Errors: SQLSTATE 22023 for a bad
-- argument, 53400 for a queue at its max_jobs or a new queue beyond the server's
-- max_queues; nothing is written either way. The caps hold between concurrent callers in
-- a transaction (a trigger's, or autocommit off): a top-level CALL under autocommit
-- commits each statement alone, releasing the locks that serialise them. There is no
-- wake-up: MySQL has no NOTIFY, so workers find the job at their next poll.
CREATE PROCEDURE {prefix}enqueue_with(
    IN p_queue TEXT CHARACTER SET utf8mb4,
    IN p_payload LONGTEXT CHARACTER SET utf8mb4,
    IN p_options LONGTEXT CHARACTER SET utf8mb4,
    OUT p_id BIGINT
)
MODIFIES SQL DATA
COMMENT '{comment}'
proc: BEGIN
    DECLARE v_queue VARCHAR(200) CHARACTER SET utf8mb4;
    DECLARE v_payload LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_kind VARCHAR(200) CHARACTER SET utf8mb4;
    DECLARE v_priority INT;
    DECLARE v_delay BIGINT;
    DECLARE v_unique_key VARCHAR(255) CHARACTER SET utf8mb4;
    DECLARE v_max_attempts INT;
    DECLARE v_queue_attempts INT;
    DECLARE v_cap BIGINT;
    DECLARE v_cap_plus BIGINT;
    DECLARE v_live BIGINT;
    DECLARE v_try INT DEFAULT 0;
    DECLARE v_duplicate INT DEFAULT 0;
    DECLARE v_max_queues INT;
    DECLARE v_counted INT;
    DECLARE v_in_use INT;
    DECLARE v_queues BIGINT;
    DECLARE v_options LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_json LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_item LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_tag LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_tags VARCHAR(2048) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_i INT DEFAULT 0;
    DECLARE v_n INT DEFAULT 0;
    DECLARE o_kind LONGTEXT CHARACTER SET utf8mb4;
    DECLARE o_priority BIGINT DEFAULT 0;
    DECLARE o_delay DOUBLE DEFAULT 0;
    DECLARE o_unique_key LONGTEXT CHARACTER SET utf8mb4;
    DECLARE o_max_attempts BIGINT;
    DECLARE v_message VARCHAR(512);  -- cut to SIGNAL's 128 characters where it is set

    SET p_id = NULL;
    -- The options object: each known key read by its JSON type; a key not known refused.
    SET v_options = COALESCE(p_options, '{}');
    IF NOT JSON_VALID(v_options) OR JSON_TYPE(v_options) <> 'OBJECT' THEN
        SIGNAL SQLSTATE '22023'
            SET MESSAGE_TEXT = '{prefix}enqueue_with: options must be a JSON object or NULL';
    END IF;
    IF JSON_LENGTH(v_options) > JSON_CONTAINS_PATH(v_options, 'one', '$.kind')
            + JSON_CONTAINS_PATH(v_options, 'one', '$.priority')
            + JSON_CONTAINS_PATH(v_options, 'one', '$.delay')
            + JSON_CONTAINS_PATH(v_options, 'one', '$.unique_key')
            + JSON_CONTAINS_PATH(v_options, 'one', '$.max_attempts')
            + JSON_CONTAINS_PATH(v_options, 'one', '$.tags') THEN
        SET v_message = LEFT(CONCAT('{prefix}enqueue_with: unknown options in ',
                               JSON_KEYS(v_options)), 128);
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_message;
    END IF;
    -- JSON null is SQL NULL; a key left out takes its default. A value of another JSON
    -- type is refused, naming the option.
    SET v_json = JSON_EXTRACT(v_options, '$.kind');
    IF JSON_TYPE(v_json) NOT IN ('STRING', 'NULL') THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = '{prefix}enqueue_with: kind must be a string';
    END IF;
    SET o_kind = IF(JSON_TYPE(v_json) = 'STRING', JSON_UNQUOTE(v_json), NULL);
    SET v_json = JSON_EXTRACT(v_options, '$.unique_key');
    IF JSON_TYPE(v_json) NOT IN ('STRING', 'NULL') THEN
        SIGNAL SQLSTATE '22023'
            SET MESSAGE_TEXT = '{prefix}enqueue_with: unique_key must be a string';
    END IF;
    SET o_unique_key = IF(JSON_TYPE(v_json) = 'STRING', JSON_UNQUOTE(v_json), NULL);
    SET v_json = JSON_EXTRACT(v_options, '$.priority');
    IF JSON_TYPE(v_json) NOT IN ('INTEGER', 'UNSIGNED INTEGER', 'NULL') THEN
        SIGNAL SQLSTATE '22023'
            SET MESSAGE_TEXT = '{prefix}enqueue_with: priority must be a 32-bit integer';
    END IF;
    IF v_json IS NOT NULL THEN
        SET o_priority = IF(JSON_TYPE(v_json) = 'NULL', NULL, v_json);
    END IF;
    SET v_json = JSON_EXTRACT(v_options, '$.delay');
    IF JSON_TYPE(v_json) NOT IN ('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL', 'NULL') THEN
        SIGNAL SQLSTATE '22023'
            SET MESSAGE_TEXT = '{prefix}enqueue_with: delay must be a number of seconds';
    END IF;
    IF v_json IS NOT NULL THEN
        SET o_delay = IF(JSON_TYPE(v_json) = 'NULL', NULL, v_json);
    END IF;
    SET v_json = JSON_EXTRACT(v_options, '$.max_attempts');
    IF JSON_TYPE(v_json) NOT IN ('INTEGER', 'UNSIGNED INTEGER', 'NULL') THEN
        SIGNAL SQLSTATE '22023'
            SET MESSAGE_TEXT = '{prefix}enqueue_with: max_attempts must be an integer';
    END IF;
    SET o_max_attempts = IF(JSON_TYPE(v_json) = 'NULL', NULL, v_json);
    -- Tags as validate.tags stores them: each of validate.TAG, duplicates dropped in the
    -- given order, at most {max_tags}, as a compact JSON array (NULL for none or []).
    SET v_json = JSON_EXTRACT(v_options, '$.tags');
    IF JSON_TYPE(v_json) NOT IN ('ARRAY', 'NULL') THEN
        SIGNAL SQLSTATE '22023'
            SET MESSAGE_TEXT = '{prefix}enqueue_with: tags must be a JSON array of strings';
    END IF;
    IF JSON_TYPE(v_json) = 'ARRAY' THEN
        WHILE v_i < JSON_LENGTH(v_json) DO
            SET v_item = JSON_EXTRACT(v_json, CONCAT('$[', v_i, ']'));
            SET v_tag = IF(JSON_TYPE(v_item) = 'STRING', JSON_UNQUOTE(v_item), NULL);
            IF v_tag IS NULL OR CHAR_LENGTH(v_tag) NOT BETWEEN 1 AND {max_tag}
                    OR OCTET_LENGTH(v_tag) <> CHAR_LENGTH(v_tag)
                    OR v_tag REGEXP '[^-A-Za-z0-9_.:]' THEN
                SET v_message = LEFT(CONCAT('{prefix}enqueue_with: a tag must be 1-{max_tag} of ',
                                       'A-Z a-z 0-9 _ . : -, got ', LEFT(v_item, 40)), 128);
                SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_message;
            END IF;
            IF v_tags IS NULL THEN
                SET v_tags = CONCAT('["', v_tag, '"]'), v_n = 1;
            ELSEIF LOCATE(CONCAT('"', v_tag, '"'), v_tags) = 0 THEN
                IF v_n = {max_tags} THEN
                    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT =
                        '{prefix}enqueue_with: tags hold more than the cap of {max_tags} tags';
                END IF;
                SET v_tags = CONCAT(LEFT(v_tags, CHAR_LENGTH(v_tags) - 1), ',"', v_tag, '"]'),
                    v_n = v_n + 1;
            END IF;
            SET v_i = v_i + 1;
        END WHILE;
    END IF;
    -- REGEXP follows the collation, and the argument's is case-insensitive (MySQL 8's
    -- utf8mb4_0900_ai_ci, MariaDB's utf8mb4_general_ci): there the Kelvin sign and the long
    -- s fold into [A-Za-z] and passed as valid. utf8mb4_bin compares exactly on both.
    IF p_queue IS NULL OR CHAR_LENGTH(p_queue) NOT BETWEEN 1 AND 200
            OR p_queue COLLATE utf8mb4_bin REGEXP '[^-A-Za-z0-9_.]' THEN
        SET v_message = LEFT(CONCAT('{prefix}enqueue: invalid queue name ',
                               COALESCE(QUOTE(LEFT(p_queue, 40)), 'NULL'),
                               ': use 1-200 of A-Z a-z 0-9 _ . -'), 128);
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_message;
    END IF;
    checked: BEGIN
    -- MySQL's JSON functions raise error 3157 (SQLSTATE 22032) for text nested more than
    -- 100 levels, where JSON_VALID would otherwise say 0: made the refusal it is, 22023
    -- naming the limit. MariaDB only notes (HY000) its 32-level limit, so this never runs
    -- there.
    DECLARE EXIT HANDLER FOR SQLSTATE '22032'
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT =
            '{prefix}enqueue: payload nests arrays and objects more than MAX_DEPTH={max_depth} deep';
    IF p_payload IS NOT NULL AND NOT JSON_VALID(p_payload) THEN
        -- MariaDB's JSON functions read at most 31 levels of nesting (json_lib's
        -- JSON_DEPTH_LIMIT of 32, counting a scalar inside as JSON_DEPTH does) and call
        -- anything deeper invalid: so there the procedure's limit is 31, not MAX_DEPTH.
        IF VERSION() LIKE '%MariaDB%' THEN
            SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT =
                '{prefix}enqueue: payload is not valid JSON, or nests deeper than MariaDB reads (31)';
        END IF;
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = '{prefix}enqueue: payload is not valid JSON';
    END IF;
    IF OCTET_LENGTH(p_payload) > {max_payload_bytes} THEN
        SET v_message = LEFT(CONCAT('{prefix}enqueue: payload is ', OCTET_LENGTH(p_payload),
                               ' bytes, over the cap of {max_payload_bytes} bytes'), 128);
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_message;
    END IF;
    -- Nesting past validate.MAX_DEPTH. JSON_DEPTH counts one more than leaseq for a
    -- container that holds something (JSON_DEPTH('[1]') is 2, '[]' is 1), so a JSON_DEPTH
    -- of MAX_DEPTH + 1 is either. Only then is the payload read again, with every empty
    -- array and object made to hold a scalar: its JSON_DEPTH is then exactly leaseq's
    -- depth + 1. JSON_EXTRACT(..., '$') gives MySQL's normal form, which writes empties
    -- as [] and {}; inside a string the replacement leaves a string. Unreached on MariaDB,
    -- whose JSON functions stop at 31 levels (above).
    IF JSON_DEPTH(p_payload) > {max_depth} THEN
        IF JSON_DEPTH(REPLACE(REPLACE(JSON_EXTRACT(p_payload, '$'), '[]', '[0]'), '{}', '[0]'))
                > {max_depth} + 1 THEN
            SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT =
                '{prefix}enqueue: payload nests arrays and objects more than MAX_DEPTH={max_depth} deep';
        END IF;
    END IF;
    END checked;
    IF o_kind IS NOT NULL AND CHAR_LENGTH(o_kind) NOT BETWEEN 1 AND {max_kind} THEN
        SIGNAL SQLSTATE '22023'
            SET MESSAGE_TEXT = '{prefix}enqueue: kind must be NULL or 1-{max_kind} characters';
    END IF;
    IF o_priority IS NULL OR o_priority NOT BETWEEN -2147483648 AND 2147483647 THEN
        SET v_message = LEFT(CONCAT('{prefix}enqueue: priority must be a 32-bit integer, got ',
                               COALESCE(o_priority, 'NULL')), 128);
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_message;
    END IF;
    IF o_delay IS NULL OR NOT (o_delay BETWEEN 0 AND {max_delay}) THEN
        SET v_message = LEFT(CONCAT('{prefix}enqueue: delay must be 0 to {max_delay} seconds, got ',
                               COALESCE(o_delay, 'NULL')), 128);
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_message;
    END IF;
    IF o_unique_key IS NOT NULL AND CHAR_LENGTH(o_unique_key) NOT BETWEEN 1 AND {max_unique_key} THEN
        SIGNAL SQLSTATE '22023'
            SET MESSAGE_TEXT = '{prefix}enqueue: unique_key must be NULL or 1-{max_unique_key} characters';
    END IF;
    IF o_max_attempts IS NOT NULL AND o_max_attempts NOT BETWEEN 1 AND {max_attempts_cap} THEN
        SET v_message = LEFT(CONCAT('{prefix}enqueue: max_attempts must be NULL or 1-{max_attempts_cap}, got ',
                               o_max_attempts), 128);
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_message;
    END IF;
    SET v_queue = p_queue, v_payload = COALESCE(p_payload, 'null'), v_kind = o_kind,
        v_priority = o_priority, v_delay = ROUND(o_delay * 1000000),
        v_unique_key = o_unique_key;

    -- The server's max_queues (configure_server), checked as the client's admit_queues
    -- does and before any queue's lock, as it is. One plain read tells whether a cap is set
    -- and the queue is counted already: then, or with no cap, no lock is taken. Otherwise
    -- the server row is locked until commit, so such callers (and clients) count the
    -- queues one after another. Under the lock the listing is read with locking reads:
    -- the caller's REPEATABLE READ snapshot may predate the callers that held it before.
    SELECT max_queues, (SELECT 1 FROM {prefix}queue_names WHERE name = v_queue)
    INTO v_max_queues, v_counted
    FROM {prefix}server WHERE id = 1;
    IF v_max_queues IS NOT NULL AND v_counted IS NULL THEN
        SELECT max_queues INTO v_max_queues FROM {prefix}server WHERE id = 1 FOR UPDATE;
        -- COUNT: a row always, so no NOT FOUND condition reaches a caller's handler.
        SELECT COUNT(*) INTO v_counted FROM {prefix}queue_names WHERE name = v_queue
        LOCK IN SHARE MODE;
        IF v_max_queues IS NOT NULL AND v_counted = 0 THEN
            -- A queue holding jobs, history or settings exists: counted without refusal.
            SELECT CASE WHEN EXISTS (SELECT 1 FROM {prefix}jobs WHERE queue = v_queue)
                          OR EXISTS (SELECT 1 FROM {prefix}queues WHERE name = v_queue)
                          OR EXISTS (SELECT 1 FROM {prefix}history WHERE queue = v_queue)
                        THEN 1 ELSE 0 END INTO v_in_use;
            IF v_in_use = 0 THEN
                SELECT COUNT(*) INTO v_queues FROM {prefix}queue_names LOCK IN SHARE MODE;
                IF v_queues + 1 > v_max_queues THEN
                    -- Short enough for SIGNAL's 128 characters with a 24-character name.
                    SET v_message = LEFT(CONCAT('{prefix}enqueue: new queue ',
                                           QUOTE(LEFT(v_queue, 24)), ' would exceed max_queues=',
                                           v_max_queues, '; nothing was enqueued'), 128);
                    SIGNAL SQLSTATE '53400' SET MESSAGE_TEXT = v_message;
                END IF;
            END IF;
            {query:add_queue_name};
        END IF;
    END IF;

    -- The queue's stored settings: its max_attempts when the call gives none, and its
    -- max_jobs, whose row is then locked as the client's capped enqueue locks it.
    SELECT max_jobs, max_attempts INTO v_cap, v_queue_attempts
    FROM {prefix}queues WHERE name = v_queue;
    SET v_max_attempts = COALESCE(o_max_attempts, v_queue_attempts, {default_max_attempts});
    IF v_cap IS NOT NULL THEN
        SELECT max_jobs INTO v_cap FROM {prefix}queues WHERE name = v_queue FOR UPDATE;
    END IF;

    IF v_unique_key IS NULL AND v_tags IS NULL THEN
        {query:insert_job};
        SET p_id = LAST_INSERT_ID();
    ELSEIF v_unique_key IS NULL THEN
        {query:insert_full_job};
        SET p_id = LAST_INSERT_ID();
    ELSE
        keyed: LOOP
            SET v_try = v_try + 1, v_duplicate = 0;
            BEGIN
                -- The key is taken: the insert changes nothing, look up the holder.
                DECLARE CONTINUE HANDLER FOR 1062 SET v_duplicate = 1;
                {query:insert_unique_job};
            END;
            IF v_duplicate = 0 THEN
                SET p_id = LAST_INSERT_ID();
                LEAVE keyed;
            END IF;
            -- A locking read sees the newest committed holder even under REPEATABLE READ.
            SELECT id INTO p_id FROM {prefix}jobs
            WHERE queue = v_queue AND unique_key = v_unique_key LOCK IN SHARE MODE;
            IF p_id IS NOT NULL THEN
                LEAVE proc;  -- a live twin holds the key: its id, nothing written
            END IF;
            IF v_try >= {unique_retries} THEN
                SIGNAL SQLSTATE '40001'
                    SET MESSAGE_TEXT = '{prefix}enqueue: the unique key kept changing hands; try again';
            END IF;
        END LOOP;
    END IF;

    IF v_cap IS NOT NULL THEN
        -- A locking read: the caller's transaction may be REPEATABLE READ (MySQL's
        -- default) with a snapshot older than the lock above, which a plain count would
        -- read, missing the jobs that enqueuers holding the lock before us committed. It
        -- share-locks at most max_jobs + 1 of the queue's rows until the caller commits.
        SET v_cap_plus = v_cap + 1;
        SELECT COUNT(*) INTO v_live
        FROM (SELECT id FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
              WHERE queue = v_queue LIMIT v_cap_plus LOCK IN SHARE MODE) AS live;
        IF v_live > v_cap THEN
            -- A failed CALL keeps its earlier statements' writes: take the row back.
            DELETE FROM {prefix}jobs WHERE id = p_id;
            SET p_id = NULL;
            SET v_message = LEFT(CONCAT('{prefix}enqueue: queue ', QUOTE(v_queue),
                                   ' holds its max_jobs=', v_cap, ' live jobs'), 128);
            SIGNAL SQLSTATE '53400' SET MESSAGE_TEXT = v_message;
        END IF;
    END IF;
END

//
CREATE PROCEDURE {prefix}enqueue(
    IN p_queue TEXT CHARACTER SET utf8mb4,
    IN p_payload LONGTEXT CHARACTER SET utf8mb4,
    IN p_kind TEXT CHARACTER SET utf8mb4,
    IN p_priority BIGINT,
    IN p_delay DOUBLE,
    IN p_unique_key TEXT CHARACTER SET utf8mb4,
    IN p_max_attempts BIGINT,
    OUT p_id BIGINT
)
MODIFIES SQL DATA
COMMENT '{comment}'
BEGIN
    -- Frozen: new options go to enqueue_with's options object, never here. A NULL
    -- priority or delay stays refused, as before (JSON null is not a left-out key). The
    -- numbers are given as expressions (+ 0): MariaDB's JSON_OBJECT writes a routine's
    -- numeric parameter itself as a JSON string.
    CALL {prefix}enqueue_with(p_queue, p_payload,
        JSON_OBJECT('kind', p_kind, 'priority', p_priority + 0, 'delay', p_delay + 0e0,
                    'unique_key', p_unique_key, 'max_attempts', p_max_attempts + 0), p_id);
END
