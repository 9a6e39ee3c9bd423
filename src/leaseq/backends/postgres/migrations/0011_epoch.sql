-- Job ids that never repeat (design §59): the identity of the server that last handed out
-- ids (its timeline) and the epoch, the number of times a new one was seen. A connection
-- that finds another identity bumps the epoch and moves the jobs' id sequence up to
-- epoch << 40, once. No row yet: the first connection records its server at epoch 0.
CREATE TABLE {prefix}epoch (
    id         integer     PRIMARY KEY CHECK (id = 1),
    identity   text        NOT NULL,
    epoch      integer     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
