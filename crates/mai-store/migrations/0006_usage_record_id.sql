-- Schema version 6: each usage row names the model call it records (`record_id`, the record's
-- uuid in its 32-hex-digit form), unique, so a record written twice — once from a running task's
-- record after a crash and once more by the run that resumed it, say — is stored once. Rows
-- written before this version have none.

ALTER TABLE usage ADD COLUMN record_id TEXT;

CREATE UNIQUE INDEX usage_by_record ON usage (record_id) WHERE record_id IS NOT NULL;
