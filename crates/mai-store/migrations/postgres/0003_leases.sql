-- PostgreSQL schema version 3: several instances on one database (docs/scale-out.md).
--
-- A running task is leased to the instance that runs it: `lease_owner` names the instance,
-- `lease_until` is when the lease runs out unless renewed (the database's clock, so instances'
-- clocks need not agree). Both are empty unless the task is running. `stop_request` is a cancel
-- or pause left for the instance that runs the task (`cancel:<actor>`, `pause:<actor>`).
--
-- Changes other instances must hear about are announced on the channel `mai_tasks` when their
-- transaction commits: `changed <id>` (a task inserted, its status changed, or its record changed
-- while it is scheduled or waiting), `stop <id> <request>` and `inject <id>`. Lease renewals and
-- the checkpoints of running tasks announce nothing.

ALTER TABLE tasks ADD COLUMN lease_owner TEXT;
ALTER TABLE tasks ADD COLUMN lease_until TIMESTAMPTZ;
ALTER TABLE tasks ADD COLUMN stop_request TEXT;

CREATE INDEX tasks_running_by_lease ON tasks (lease_owner, lease_until) WHERE status = 'running';

CREATE FUNCTION mai_task_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('mai_tasks', 'changed ' || NEW.id);
    ELSIF NEW.stop_request IS NOT NULL
          AND NEW.stop_request IS DISTINCT FROM OLD.stop_request THEN
        PERFORM pg_notify('mai_tasks', 'stop ' || NEW.id || ' ' || NEW.stop_request);
    ELSIF NEW.status IS DISTINCT FROM OLD.status
          OR (NEW.status IN ('scheduled', 'waiting_input', 'paused')
              AND NEW.record IS DISTINCT FROM OLD.record) THEN
        PERFORM pg_notify('mai_tasks', 'changed ' || NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_notify AFTER INSERT OR UPDATE ON tasks
    FOR EACH ROW EXECUTE FUNCTION mai_task_notify();

CREATE FUNCTION mai_injection_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mai_tasks', 'inject ' || NEW.task_id);
    RETURN NULL;
END
$$;

CREATE TRIGGER task_history_injection_notify AFTER INSERT ON task_history
    FOR EACH ROW WHEN (NEW.kind = 'injection') EXECUTE FUNCTION mai_injection_notify();
