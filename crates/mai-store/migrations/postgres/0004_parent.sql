-- PostgreSQL schema version 4: the task that made a task (a sub-task's or a reply's parent) in a
-- column of its own, set once when the task is inserted and indexed, so "the tasks this task
-- made" is an index range instead of a read of every record (as SQLite's version 5).

ALTER TABLE tasks ADD COLUMN parent_id TEXT;

UPDATE tasks SET parent_id = replace(record::jsonb #>> '{metadata,parent_task_id}', '-', '')
WHERE record::jsonb #>> '{metadata,parent_task_id}' IS NOT NULL;

CREATE INDEX tasks_by_parent ON tasks (parent_id, created_at, id) WHERE parent_id IS NOT NULL;
