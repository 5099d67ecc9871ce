-- The embedded host's schema on PostgreSQL, version 3: routing MaiBot bridge requests between
-- instances. The MaiBot plugin keeps its bridge open to one `serve`; another instance sharing
-- this database that must ask MaiBot something (send a reply part, read a chat's history)
-- writes the request here and the instance holding the bridge answers it (the maibot relay of
-- mai-host). Both tables hold only what is in flight: a holder's row lives while its bridge is
-- connected, a call's row until its caller has read the answer or given up. SQLite (one
-- instance) has no such tables.

-- The instances holding a MaiBot bridge now, each with a lease renewed by its heartbeat: a
-- holder that died stops counting once `lease_until` (the database's clock) has passed.
CREATE TABLE host_bridge_holders (
    instance    TEXT PRIMARY KEY,
    lease_until TIMESTAMPTZ NOT NULL
);

-- One bridge request of an instance without a bridge: the method and params the plugin is sent
-- (JSON text), taken by one holder (`taken_by`, with FOR UPDATE SKIP LOCKED), answered with
-- `{"result": …}` or `{"error": {"code", "message"}}` (JSON text). Not taken after `deadline`
-- (its caller stopped waiting).
CREATE TABLE host_bridge_calls (
    id         TEXT PRIMARY KEY,
    caller     TEXT NOT NULL,
    method     TEXT NOT NULL,
    params     TEXT NOT NULL,
    deadline   TIMESTAMPTZ NOT NULL,
    taken_by   TEXT,
    answer     TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX host_bridge_calls_untaken ON host_bridge_calls (created_at) WHERE taken_by IS NULL;
