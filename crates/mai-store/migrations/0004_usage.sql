-- Schema version 4: one row per model call — what it cost and whom it served. No foreign key to
-- tasks: retention deletes finished tasks, never the usage they caused (the budgets and the
-- per-owner, per-stream, per-model and per-day sums read these rows).

CREATE TABLE usage (
    id                INTEGER PRIMARY KEY,
    -- RFC 3339 in UTC with fixed nanosecond width, like tasks.created_at.
    at                TEXT NOT NULL,
    -- The calendar day of `at` in [task] timezone when it was recorded (YYYY-MM-DD).
    day               TEXT NOT NULL,
    -- The task it served (32 hex digits); a title's task may have been refused after the call.
    task_id           TEXT,
    round             INTEGER NOT NULL,
    purpose           TEXT NOT NULL,
    model             TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    estimated         INTEGER NOT NULL,
    latency_ms        INTEGER NOT NULL,
    owner             TEXT NOT NULL,
    requester         TEXT,
    stream_id         TEXT NOT NULL,
    cost              REAL
) STRICT;

CREATE INDEX usage_by_at ON usage (at);
CREATE INDEX usage_by_task ON usage (task_id) WHERE task_id IS NOT NULL;
-- The daily budgets sum one requester's or one stream's rows since the day began.
CREATE INDEX usage_by_requester ON usage (requester, at) WHERE requester IS NOT NULL;
CREATE INDEX usage_by_stream ON usage (stream_id, at);
