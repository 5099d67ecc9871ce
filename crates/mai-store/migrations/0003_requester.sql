-- Schema version 3: who each task acts for, and which task made it, as columns written once at
-- insert (saves never touch them, so they cost no index update per checkpoint).
--
-- `requester` is the person (`platform:user_id`) the task acts for: its owner for a person's
-- task, the speaker for a planner task (from the record, when the host named one), none for a
-- planner task made without a speaker. `created_by` is the task whose `create_subtask` made it;
-- reply tasks (they deliver a result, titled `reply: …`) are not counted as made by their parent.

ALTER TABLE tasks ADD COLUMN requester TEXT;
ALTER TABLE tasks ADD COLUMN created_by TEXT;

UPDATE tasks SET requester = CASE
    WHEN substr(owner, 1, 8) <> 'planner:' THEN owner
    ELSE json_extract(record, '$.metadata.requester')
END;

UPDATE tasks SET created_by = replace(json_extract(record, '$.metadata.parent_task_id'), '-', '')
WHERE json_extract(record, '$.metadata.parent_task_id') IS NOT NULL
  AND NOT (level = 'instant' AND title LIKE 'reply: %');

CREATE INDEX tasks_by_requester ON tasks (requester, created_at, id);
CREATE INDEX tasks_by_created_by ON tasks (created_by) WHERE created_by IS NOT NULL;
-- The caps on unfinished tasks per requester and per stream count these.
CREATE INDEX tasks_active_by_requester ON tasks (requester)
    WHERE status IN ('scheduled', 'pending', 'running', 'waiting_input', 'paused');
CREATE INDEX tasks_active_by_stream ON tasks (stream_id)
    WHERE status IN ('scheduled', 'pending', 'running', 'waiting_input', 'paused');
