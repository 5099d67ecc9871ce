-- Embedded host schema version 1. Every table is prefixed `host_` so the host can live in the
-- task database file; its migrations are recorded in `_mai_host_migrations`, not in the task
-- store's `_sqlx_migrations`.
-- Times are INTEGER milliseconds since the Unix epoch (UTC).

CREATE TABLE host_streams (
    stream_id   TEXT NOT NULL PRIMARY KEY,
    platform    TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('group', 'private')),
    -- The group id of a group chat, the other person's user id of a private chat.
    target_id   TEXT NOT NULL,
    -- Group name, or the person's display name.
    name        TEXT NOT NULL,
    last_active INTEGER NOT NULL,
    UNIQUE (platform, kind, target_id)
) STRICT;

CREATE INDEX host_streams_by_activity ON host_streams (last_active DESC, stream_id);

-- Names are not unique: two accounts that first appear under the same nickname are two people
-- until someone links them (`add_person`).
CREATE TABLE host_persons (
    person_id INTEGER PRIMARY KEY,
    name      TEXT NOT NULL
) STRICT;

CREATE INDEX host_persons_by_name ON host_persons (name);

CREATE TABLE host_person_aliases (
    person_id INTEGER NOT NULL REFERENCES host_persons (person_id) ON DELETE CASCADE,
    alias     TEXT NOT NULL,
    PRIMARY KEY (person_id, alias)
) STRICT, WITHOUT ROWID;

CREATE INDEX host_person_aliases_by_alias ON host_person_aliases (alias);

CREATE TABLE host_accounts (
    platform     TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    person_id    INTEGER NOT NULL REFERENCES host_persons (person_id) ON DELETE CASCADE,
    display_name TEXT NOT NULL,
    last_seen    INTEGER NOT NULL,
    PRIMARY KEY (platform, user_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX host_accounts_by_person ON host_accounts (person_id);

CREATE TABLE host_person_notes (
    note_id   INTEGER PRIMARY KEY,
    person_id INTEGER NOT NULL REFERENCES host_persons (person_id) ON DELETE CASCADE,
    note      TEXT NOT NULL,
    UNIQUE (person_id, note)
) STRICT;

CREATE TABLE host_messages (
    message_id  INTEGER PRIMARY KEY,
    stream_id   TEXT NOT NULL REFERENCES host_streams (stream_id),
    -- The sender's user id on the stream's platform; `self` for the bot's own messages.
    user_id     TEXT NOT NULL,
    sender_name TEXT NOT NULL,
    text        TEXT NOT NULL,
    at          INTEGER NOT NULL,
    is_bot      INTEGER NOT NULL CHECK (is_bot IN (0, 1))
) STRICT;

CREATE INDEX host_messages_by_stream ON host_messages (stream_id, at, message_id);
CREATE INDEX host_messages_by_sender ON host_messages (user_id, at);
CREATE INDEX host_messages_by_time ON host_messages (at);

CREATE TRIGGER host_messages_are_append_only BEFORE UPDATE ON host_messages
BEGIN
    SELECT RAISE(ABORT, 'host_messages is append-only');
END;

-- Trigram tokens: substring search that works for Chinese (no word segmentation needed); a
-- term needs at least 3 characters to use the index.
CREATE VIRTUAL TABLE host_messages_fts USING fts5 (
    text,
    content = 'host_messages',
    content_rowid = 'message_id',
    tokenize = 'trigram'
);

CREATE TRIGGER host_messages_fts_insert AFTER INSERT ON host_messages
BEGIN
    INSERT INTO host_messages_fts (rowid, text) VALUES (new.message_id, new.text);
END;

CREATE TRIGGER host_messages_fts_delete AFTER DELETE ON host_messages
BEGIN
    INSERT INTO host_messages_fts (host_messages_fts, rowid, text)
    VALUES ('delete', old.message_id, old.text);
END;

-- Knowledge notes: searchable alongside messages. A NULL stream is a note for every stream.
CREATE TABLE host_notes (
    note_id   INTEGER PRIMARY KEY,
    stream_id TEXT,
    text      TEXT NOT NULL,
    at        INTEGER NOT NULL
) STRICT;

CREATE INDEX host_notes_by_stream ON host_notes (stream_id, at);

CREATE VIRTUAL TABLE host_notes_fts USING fts5 (
    text,
    content = 'host_notes',
    content_rowid = 'note_id',
    tokenize = 'trigram'
);

CREATE TRIGGER host_notes_fts_insert AFTER INSERT ON host_notes
BEGIN
    INSERT INTO host_notes_fts (rowid, text) VALUES (new.note_id, new.text);
END;

CREATE TRIGGER host_notes_fts_delete AFTER DELETE ON host_notes
BEGIN
    INSERT INTO host_notes_fts (host_notes_fts, rowid, text)
    VALUES ('delete', old.note_id, old.text);
END;

CREATE TRIGGER host_notes_fts_update AFTER UPDATE ON host_notes
BEGIN
    INSERT INTO host_notes_fts (host_notes_fts, rowid, text)
    VALUES ('delete', old.note_id, old.text);
    INSERT INTO host_notes_fts (rowid, text) VALUES (new.note_id, new.text);
END;

-- Slang: `scope` is a stream id, or '' for a term every stream uses.
CREATE TABLE host_jargon (
    scope   TEXT NOT NULL,
    term    TEXT NOT NULL,
    meaning TEXT NOT NULL,
    PRIMARY KEY (scope, term)
) STRICT, WITHOUT ROWID;

CREATE TABLE host_frequency (
    stream_id TEXT NOT NULL PRIMARY KEY,
    value     REAL NOT NULL
) STRICT, WITHOUT ROWID;

-- The invisible notes `append_context` adds; the planner board reads them back.
CREATE TABLE host_context_notes (
    note_id   INTEGER PRIMARY KEY,
    stream_id TEXT NOT NULL,
    note      TEXT NOT NULL,
    at        INTEGER NOT NULL
) STRICT;

CREATE INDEX host_context_notes_by_stream ON host_context_notes (stream_id, note_id);
