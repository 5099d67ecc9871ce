-- Schema version 1: tasks, their append-only status log and their ordered agent history.

CREATE TABLE tasks (
    -- The uuid in its 32-hex-digit simple form, so an id prefix is a range scan on this key.
    id         TEXT NOT NULL PRIMARY KEY,
    title      TEXT NOT NULL,
    owner      TEXT NOT NULL,
    stream_id  TEXT NOT NULL,
    status     TEXT NOT NULL,
    level      TEXT NOT NULL,
    -- RFC 3339 in UTC with fixed nanosecond width: text order is time order.
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    -- The whole record as JSON, except its status log (the rows of task_status_log).
    record     TEXT NOT NULL
) STRICT;

-- Lists are ordered by (created_at, id): each filter index carries both, so no sort step.
CREATE INDEX tasks_by_owner ON tasks (owner, created_at, id);
CREATE INDEX tasks_by_stream ON tasks (stream_id, created_at, id);
CREATE INDEX tasks_by_status ON tasks (status, created_at, id);
CREATE INDEX tasks_by_level ON tasks (level, created_at, id);
CREATE INDEX tasks_by_created ON tasks (created_at, id);
CREATE INDEX tasks_by_title ON tasks (title, created_at, id);

CREATE TABLE task_status_log (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    at      TEXT NOT NULL,
    status  TEXT NOT NULL,
    actor   TEXT NOT NULL,
    reason  TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER task_status_log_is_append_only BEFORE UPDATE ON task_status_log
BEGIN
    SELECT RAISE(ABORT, 'task_status_log is append-only');
END;

-- A rowid table: payloads (whole chat messages) can be large.
CREATE TABLE task_history (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    round   INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    payload TEXT NOT NULL,
    at      TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
) STRICT;

CREATE TRIGGER task_history_is_append_only BEFORE UPDATE ON task_history
BEGIN
    SELECT RAISE(ABORT, 'task_history is append-only');
END;
