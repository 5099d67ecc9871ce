-- The embedded host's schema on PostgreSQL, version 2: the platform message ids already taken
-- in. Several instances connected to one OneBot implementation (or MaiBot bridge) each receive
-- every message; the first to insert its id here processes it, the others find it taken and drop
-- their copy. `at` is when it was taken in (milliseconds since the Unix epoch; not the message's
-- own time, which may be old): the ids are pruned with the messages' cutoff. SQLite (one
-- instance) has no such table.

CREATE TABLE host_inbound_seen (
    platform            TEXT NOT NULL,
    platform_message_id TEXT NOT NULL,
    at                  BIGINT NOT NULL,
    PRIMARY KEY (platform, platform_message_id)
);

CREATE INDEX host_inbound_seen_by_time ON host_inbound_seen (at);
