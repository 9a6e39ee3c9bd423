-- {prefix}enqueue: leaseq's enqueue as a SQL function, for triggers and for producers in
-- any language (docs/enqueue-from-sql-and-http.md). `migrate` installs it and replaces it
-- whenever this text changes (PostgresRunner.install_routine); a comment on the function
-- holds the fingerprint of the text installed.
--
-- The writes are the client's own statements: each {query:...} below is the named query
-- of queries.sql, with its :parameters replaced by the variables of this function
-- (driver.ROUTINE_PARAMS). The checks repeat leaseq._core.validate with the same limits
-- ({...} constants come from it); tests/test_sql_enqueue.py compares the function with
-- the client on the same inputs.
--
-- Returns the job's id; with a unique_key that a live job holds already, that job's id
-- (nothing is written, as the client's created=False). Errors: SQLSTATE 22023
-- (invalid_parameter_value) for a bad argument, 53400 (configuration_limit_exceeded) for
-- a queue at its max_jobs or a new queue beyond the server's max_queues; either way
-- nothing is written.
--
-- Options are appended as arguments with defaults, so every older call keeps working:
-- tags (issue 31) came last, as `tags => ARRAY['billing', 'eu']`. The installer drops
-- the other overloads of this name first (the 7-argument function of before), so calls
-- keep resolving to one function. Every later option is appended the same way, last,
-- with a default, and declared in leaseq/_core/options.py.
CREATE OR REPLACE FUNCTION {prefix}enqueue(
    queue text,
    payload jsonb,
    kind text DEFAULT NULL,
    priority integer DEFAULT 0,
    delay interval DEFAULT '0',
    unique_key text DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    tags text[] DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
-- The tables are found where migrate made them, whatever the caller's search_path.
SET search_path FROM CURRENT
AS $leaseq$
#variable_conflict use_column
DECLARE
    fn constant text := '{prefix}enqueue';
    v_queue text := queue;
    v_kind text := kind;
    v_payload text := COALESCE(payload::text, 'null');
    v_json jsonb := payload;
    v_priority integer := priority;
    v_delay double precision := EXTRACT(EPOCH FROM delay);
    v_unique_key text := unique_key;
    v_max_attempts integer := max_attempts;
    v_tags text;
    v_tag text;
    v_count bigint;
    v_cap bigint;
    v_queue_attempts integer;
    v_live bigint;
    v_id bigint;
    v_note text;
    v_max_queues integer;
    v_counted integer;
    v_in_use integer;
    v_queues bigint;
BEGIN
    IF v_queue IS NULL OR v_queue !~ '^[-A-Za-z0-9_.]{1,200}$' THEN
        RAISE EXCEPTION '%: invalid queue name %: use 1-200 characters of A-Z a-z 0-9 _ . -',
            fn, COALESCE(quote_literal(left(v_queue, 80)), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF octet_length(v_payload) > {max_payload_bytes} THEN
        RAISE EXCEPTION '%: payload is % bytes encoded, over the cap of {max_payload_bytes} bytes; store large data elsewhere and enqueue a reference',
            fn, octet_length(v_payload) USING ERRCODE = '22023';
    END IF;
    -- Nesting past validate.MAX_DEPTH: an array or object at depth MAX_DEPTH + 1. The
    -- path's levels count from the payload itself at 0, so the containers of depth d sit
    -- at level d - 1, and level MAX_DEPTH holds those one too deep. strict, because lax
    -- mode unwraps arrays and would miscount them.
    IF jsonb_path_exists(v_json,
            'strict $.**{{max_depth} to last} ? (@.type() == "array" || @.type() == "object")') THEN
        RAISE EXCEPTION '%: payload nests arrays and objects more than MAX_DEPTH={max_depth} levels deep; flatten it',
            fn USING ERRCODE = '22023';
    END IF;
    IF v_kind IS NOT NULL AND NOT char_length(v_kind) BETWEEN 1 AND {max_kind} THEN
        RAISE EXCEPTION '%: kind must be NULL or a string of 1-{max_kind} characters, got % characters',
            fn, char_length(v_kind) USING ERRCODE = '22023';
    END IF;
    IF v_priority IS NULL THEN
        RAISE EXCEPTION '%: priority must be an integer, got NULL', fn USING ERRCODE = '22023';
    END IF;
    IF v_delay IS NULL OR v_delay < 0 OR v_delay > {max_delay} THEN
        RAISE EXCEPTION '%: delay must be an interval of 0 to 3650 days, got %',
            fn, COALESCE(delay::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF v_unique_key IS NOT NULL AND NOT char_length(v_unique_key) BETWEEN 1 AND {max_unique_key} THEN
        RAISE EXCEPTION '%: unique_key must be NULL or a string of 1-{max_unique_key} characters, got % characters',
            fn, char_length(v_unique_key) USING ERRCODE = '22023';
    END IF;
    IF v_max_attempts IS NOT NULL AND NOT v_max_attempts BETWEEN 1 AND {max_attempts_cap} THEN
        RAISE EXCEPTION '%: max_attempts must be NULL or an integer in [1, {max_attempts_cap}], got %',
            fn, v_max_attempts USING ERRCODE = '22023';
    END IF;
    -- Tags as validate.tags stores them: each of validate.TAG, duplicates dropped in the
    -- given order, at most {max_tags}; the compact JSON array (to_json writes no spaces),
    -- NULL for none.
    IF tags IS NOT NULL THEN
        FOREACH v_tag IN ARRAY tags LOOP
            IF v_tag IS NULL OR v_tag !~ '^[-A-Za-z0-9_.:]{1,{max_tag}}$' THEN
                RAISE EXCEPTION '%: a tag must be 1-{max_tag} characters of A-Z a-z 0-9 _ . : -, got %',
                    fn, COALESCE(quote_literal(left(v_tag, 80)), 'NULL') USING ERRCODE = '22023';
            END IF;
        END LOOP;
        SELECT to_json(array_agg(d.t ORDER BY d.n))::text, count(*) INTO v_tags, v_count
        FROM (SELECT u.t, min(u.n) AS n FROM unnest(tags) WITH ORDINALITY AS u(t, n)
              GROUP BY u.t) AS d;
        IF v_count > {max_tags} THEN
            RAISE EXCEPTION '%: tags hold % tags, over the cap of {max_tags}', fn, v_count
                USING ERRCODE = '22023';
        END IF;
    END IF;

    -- The server's max_queues (configure_server), checked as the client's admit_queues
    -- does and before any queue's lock, as it is. One read tells whether a cap is set and
    -- the queue is counted already: then, or with no cap, no lock is taken. Otherwise the
    -- server row is locked until commit, so such callers (and clients) count the queues
    -- one after another, and the cap and the listing are read again under that lock.
    SELECT s.max_queues,
           (SELECT 1 FROM {prefix}queue_names AS n WHERE n.name = v_queue)
    INTO v_max_queues, v_counted
    FROM {prefix}server AS s WHERE s.id = 1;
    IF v_max_queues IS NOT NULL AND v_counted IS NULL THEN
        {query:lock_server} INTO v_max_queues;
        {query:queue_counted} INTO v_counted;
        IF v_max_queues IS NOT NULL AND v_counted IS NULL THEN
            -- A queue holding jobs, history or settings exists: counted without refusal.
            {query:queue_in_use} INTO v_in_use;
            IF v_in_use = 0 THEN
                {query:count_queues} INTO v_queues;
                IF v_queues + 1 > v_max_queues THEN
                    RAISE EXCEPTION '%: queue % would be queue % of at most max_queues=%; nothing was enqueued',
                        fn, quote_literal(v_queue), v_queues + 1, v_max_queues
                        USING ERRCODE = '53400';
                END IF;
            END IF;
            {query:add_queue_name};
        END IF;
    END IF;

    -- The queue's stored settings: its max_attempts when the call gives none, and its
    -- max_jobs, whose row is then locked as the client's capped enqueue locks it.
    SELECT s.max_jobs, s.max_attempts INTO v_cap, v_queue_attempts
    FROM {prefix}queues AS s WHERE s.name = v_queue;
    v_max_attempts := COALESCE(v_max_attempts, v_queue_attempts, {default_max_attempts});
    IF v_cap IS NOT NULL THEN
        {query:lock_queue_cap} INTO v_cap;
    END IF;

    IF v_unique_key IS NULL AND v_tags IS NULL THEN
        {query:insert_job} INTO v_id, v_note;
    ELSIF v_unique_key IS NULL THEN
        {query:insert_full_job} INTO v_id, v_note;
    ELSE
        FOR attempt IN 1..{unique_retries} LOOP
            {query:insert_unique_job} INTO v_id, v_note;
            EXIT WHEN v_id IS NOT NULL;
            {query:find_unique} INTO v_id;
            IF v_id IS NOT NULL THEN
                RETURN v_id;  -- a live twin holds the key: its id, nothing written
            END IF;
            -- The twin left the live table between the insert and the lookup: again.
        END LOOP;
        IF v_id IS NULL THEN
            RAISE EXCEPTION '%: unique key % kept changing hands; try again',
                fn, quote_literal(v_unique_key) USING ERRCODE = '40001';
        END IF;
    END IF;

    IF v_cap IS NOT NULL THEN
        {query:live_count} INTO v_live;
        IF v_live > v_cap THEN
            -- The exception takes back the row (and its wake-up) with the statement.
            RAISE EXCEPTION '%: queue % holds its max_jobs=% live jobs; nothing was enqueued',
                fn, quote_literal(v_queue), v_cap USING ERRCODE = '53400';
        END IF;
    END IF;
    RETURN v_id;
END
$leaseq$
