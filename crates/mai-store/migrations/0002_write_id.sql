-- Which group-commit write last stored a task row (a random id per write). A batch is one fixed
-- program over all its writes (src/one_trip.rs): the status-log lines, history rows and
-- dependent inserts of a write are stored only if its first statement stored its write id.
ALTER TABLE tasks ADD COLUMN write_id INTEGER;
