-- PostgreSQL schema version 1 of the task store: the same tables and columns as the SQLite
-- schema at its version 3 (tasks with requester and created_by, the append-only status log, the
-- ordered agent history), so both backends share one codec (src/codec.rs).
--
-- Ids and times are text compared byte by byte (COLLATE "C", whatever the database's locale):
-- an id prefix is a key range, and RFC 3339 times of fixed width sort as times. The record is
-- the JSON text the codec writes, kept exactly as written.

CREATE TABLE tasks (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    title      TEXT NOT NULL,
    owner      TEXT NOT NULL,
    stream_id  TEXT NOT NULL,
    status     TEXT NOT NULL,
    level      TEXT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    record     TEXT NOT NULL,
    requester  TEXT,
    created_by TEXT COLLATE "C"
);

CREATE INDEX tasks_by_owner ON tasks (owner, created_at, id);
CREATE INDEX tasks_by_stream ON tasks (stream_id, created_at, id);
CREATE INDEX tasks_by_status ON tasks (status, created_at, id);
CREATE INDEX tasks_by_level ON tasks (level, created_at, id);
CREATE INDEX tasks_by_created ON tasks (created_at, id);
CREATE INDEX tasks_by_title ON tasks (title, created_at, id);
CREATE INDEX tasks_by_requester ON tasks (requester, created_at, id);
CREATE INDEX tasks_by_created_by ON tasks (created_by) WHERE created_by IS NOT NULL;
CREATE INDEX tasks_active_by_requester ON tasks (requester)
    WHERE status IN ('scheduled', 'pending', 'running', 'waiting_input', 'paused');
CREATE INDEX tasks_active_by_stream ON tasks (stream_id)
    WHERE status IN ('scheduled', 'pending', 'running', 'waiting_input', 'paused');

CREATE TABLE task_status_log (
    task_id TEXT COLLATE "C" NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    at      TEXT NOT NULL,
    status  TEXT NOT NULL,
    actor   TEXT NOT NULL,
    reason  TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

CREATE TABLE task_history (
    task_id TEXT COLLATE "C" NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    round   BIGINT NOT NULL,
    kind    TEXT NOT NULL,
    payload TEXT NOT NULL,
    at      TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- The log and the history are append-only, even for a person with psql.
CREATE FUNCTION mai_refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END
$$;

CREATE TRIGGER task_status_log_is_append_only BEFORE UPDATE ON task_status_log
    FOR EACH ROW EXECUTE FUNCTION mai_refuse_update();

CREATE TRIGGER task_history_is_append_only BEFORE UPDATE ON task_history
    FOR EACH ROW EXECUTE FUNCTION mai_refuse_update();
