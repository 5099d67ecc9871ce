-- Schema version 7: a task's agent history is one key range of one b-tree. Each task gets a
-- number (`tasks.num`, increasing: a new task gets the highest), and a history entry's key is
-- `num << 32 | seq`, the table's own rowid. So a task's entries sit together, a new entry of a
-- recent task lands at the right edge, and an append writes one page: the table's old key
-- (task_id, seq) was a second b-tree whose random task ids put every append in the middle of
-- full pages (three siblings and their parent rewritten each time a page overflowed). The
-- task_id and seq columns stay for readers; the history goes with its task by a trigger (the
-- foreign key would scan the table for every deleted task, having no index to use).

ALTER TABLE tasks ADD COLUMN num INTEGER;

UPDATE tasks SET num = rowid;

CREATE UNIQUE INDEX tasks_by_num ON tasks (num);

CREATE TABLE task_history_keyed (
    -- (tasks.num << 32) | seq
    key     INTEGER PRIMARY KEY,
    task_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    round   INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    payload TEXT NOT NULL,
    at      TEXT NOT NULL
) STRICT;

INSERT INTO task_history_keyed (key, task_id, seq, round, kind, payload, at)
SELECT (t.num << 32) | h.seq, h.task_id, h.seq, h.round, h.kind, h.payload, h.at
FROM task_history h JOIN tasks t ON t.id = h.task_id
ORDER BY t.num, h.seq;

DROP TABLE task_history;

ALTER TABLE task_history_keyed RENAME TO task_history;

CREATE TRIGGER task_history_is_append_only BEFORE UPDATE ON task_history
BEGIN
    SELECT RAISE(ABORT, 'task_history is append-only');
END;

CREATE TRIGGER task_history_goes_with_its_task AFTER DELETE ON tasks
BEGIN
    DELETE FROM task_history WHERE key >= (OLD.num << 32) AND key < ((OLD.num + 1) << 32);
END;
