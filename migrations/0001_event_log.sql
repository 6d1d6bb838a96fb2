-- The event log (ref 9.1 `events`) and the host-to-guest outbox (ref 9.2
-- `inbound_events`), keyed by resource identity: a Dot is its namespace and
-- name plus its UID. Rows follow the UID, so a Dot deleted and made again under
-- the same name starts a new log, and a deletion removes its rows by UID.

CREATE TABLE events (
	id            bigserial PRIMARY KEY,
	dot_namespace text NOT NULL,
	dot_name      text NOT NULL,
	dot_uid       text NOT NULL,
	type          text NOT NULL,
	data          jsonb NOT NULL DEFAULT '{}'::jsonb,
	source        text NOT NULL CHECK (source IN ('host', 'guest')),
	-- The guest's own sequence number; null for the host's events.
	guest_seq     bigint,
	created_at    timestamptz NOT NULL DEFAULT now(),
	-- A guest event delivered twice is stored once.
	CONSTRAINT events_dot_guest_seq UNIQUE (dot_uid, guest_seq)
);

-- Reading a Dot's log after a known id, the stream's resume.
CREATE INDEX events_dot_id ON events (dot_uid, id);

-- A channel message is stored once, by the channel's own id (ref 9.8).
CREATE UNIQUE INDEX events_channel_origin ON events (
	dot_uid, (data -> 'origin' ->> 'binding_id'), (data -> 'origin' ->> 'external_id'))
	WHERE type = 'user.message' AND data ? 'origin';

-- An answer finds the message it answers.
CREATE INDEX events_user_message ON events (dot_uid, (data ->> 'message_id'))
	WHERE type = 'user.message';

CREATE TABLE inbound_events (
	seq           bigserial PRIMARY KEY,
	-- Deterministic (DESIGN.md 4): task-<task uid>-<run>, approval-<approval
	-- uid>, ...; the guest ignores an id it has seen (ref 5.4).
	id            text NOT NULL UNIQUE,
	dot_namespace text NOT NULL,
	dot_name      text NOT NULL,
	dot_uid       text NOT NULL,
	type          text NOT NULL,
	data          jsonb NOT NULL DEFAULT '{}'::jsonb,
	ts            timestamptz NOT NULL DEFAULT now(),
	task_uid      text,
	run           integer,
	created_at    timestamptz NOT NULL DEFAULT now(),
	sent_at       timestamptz,
	delivered_at  timestamptz,
	dropped_at    timestamptz,
	drop_reason   text,
	failures      integer NOT NULL DEFAULT 0,
	last_error    text,
	retry_at      timestamptz
);

-- The deliverer's question: a Dot's rows neither delivered nor dropped, in order.
CREATE INDEX inbound_events_pending ON inbound_events (dot_uid, seq)
	WHERE delivered_at IS NULL AND dropped_at IS NULL;

-- Who holds the control-plane lock (internal/postgres), for the message a
-- second control plane on this database gets. At most one row.
CREATE TABLE control_plane_holder (
	singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
	pid         integer NOT NULL,
	host        text NOT NULL,
	home        text NOT NULL,
	backend_pid integer NOT NULL,
	since       timestamptz NOT NULL
);
