-- Embedded host schema version 2: who has been seen in which stream, so "does this person belong
-- to this group?" is one primary-key lookup instead of a scan of the group's messages.
-- A row is added by the trigger below for every message a person sends (never for the bot's), and
-- by `EmbeddedHost::add_member` for a member a channel knows of. Membership of a private chat is
-- not read from here: a private chat belongs to exactly its person (`host_streams.target_id`).

CREATE TABLE host_members (
    stream_id TEXT NOT NULL REFERENCES host_streams (stream_id),
    -- The person's user id on the stream's platform.
    user_id   TEXT NOT NULL,
    PRIMARY KEY (stream_id, user_id)
) STRICT, WITHOUT ROWID;

-- Inside the message's own INSERT: no extra statement on the ingest path.
CREATE TRIGGER host_members_from_messages AFTER INSERT ON host_messages
WHEN new.is_bot = 0
BEGIN
    INSERT OR IGNORE INTO host_members (stream_id, user_id) VALUES (new.stream_id, new.user_id);
END;

-- Everyone already seen writing.
INSERT OR IGNORE INTO host_members (stream_id, user_id)
SELECT DISTINCT stream_id, user_id FROM host_messages WHERE is_bot = 0;
