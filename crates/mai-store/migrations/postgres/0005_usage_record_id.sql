-- PostgreSQL schema version 5: each usage row names the model call it records (`record_id`),
-- unique, so a record written twice is stored once (as SQLite's version 6).

ALTER TABLE usage ADD COLUMN record_id TEXT COLLATE "C";

CREATE UNIQUE INDEX usage_by_record ON usage (record_id) WHERE record_id IS NOT NULL;
