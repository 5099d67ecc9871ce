-- Schema version 8: a task's status log is one key range of one b-tree, as its history is
-- (version 7). A line's key is `tasks.num << 32 | seq`, the table's own rowid: a new line of a
-- recent task lands at the right edge, beside the lines written with it, where the old key
-- (task_id, seq) put every line at a random task id in the middle of full pages. The task_id
-- and seq columns stay for readers; the log goes with its task by a trigger, as the history
-- does.

CREATE TABLE task_status_log_keyed (
    -- (tasks.num << 32) | seq
    key     INTEGER PRIMARY KEY,
    task_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    at      TEXT NOT NULL,
    status  TEXT NOT NULL,
    actor   TEXT NOT NULL,
    reason  TEXT NOT NULL
) STRICT;

INSERT INTO task_status_log_keyed (key, task_id, seq, at, status, actor, reason)
SELECT (t.num << 32) | l.seq, l.task_id, l.seq, l.at, l.status, l.actor, l.reason
FROM task_status_log l JOIN tasks t ON t.id = l.task_id
ORDER BY t.num, l.seq;

DROP TABLE task_status_log;

ALTER TABLE task_status_log_keyed RENAME TO task_status_log;

CREATE TRIGGER task_status_log_is_append_only BEFORE UPDATE ON task_status_log
BEGIN
    SELECT RAISE(ABORT, 'task_status_log is append-only');
END;

CREATE TRIGGER task_status_log_goes_with_its_task AFTER DELETE ON tasks
BEGIN
    DELETE FROM task_status_log WHERE key >= (OLD.num << 32) AND key < ((OLD.num + 1) << 32);
END;
