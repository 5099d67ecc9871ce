-- PostgreSQL schema version 2 of the task store: the usage table of the SQLite schema's version 4
-- (one row per model call; no foreign key to tasks: retention never deletes usage).

CREATE TABLE usage (
    id                BIGSERIAL PRIMARY KEY,
    at                TEXT COLLATE "C" NOT NULL,
    day               TEXT COLLATE "C" NOT NULL,
    task_id           TEXT COLLATE "C",
    round             BIGINT NOT NULL,
    purpose           TEXT NOT NULL,
    model             TEXT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cached_tokens     BIGINT NOT NULL,
    estimated         BIGINT NOT NULL,
    latency_ms        BIGINT NOT NULL,
    owner             TEXT NOT NULL,
    requester         TEXT,
    stream_id         TEXT NOT NULL,
    cost              DOUBLE PRECISION
);

CREATE INDEX usage_by_at ON usage (at);
CREATE INDEX usage_by_task ON usage (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX usage_by_requester ON usage (requester, at) WHERE requester IS NOT NULL;
CREATE INDEX usage_by_stream ON usage (stream_id, at);
