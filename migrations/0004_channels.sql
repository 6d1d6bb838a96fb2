-- A Dot's messaging channels (ref 9.8). The link itself is a Channel
-- resource; what it keeps that is not a resource lives here, by the
-- Channel's uid (binding_id): the people allowed to talk through it, the
-- one-time pairing codes, stored only as their SHA-256 hash, where the hub's
-- outbound reading of the Dot's log stands, and the approval prompts it
-- sent. The rows go with the Channel (the hub's finalizer) and with its Dot.

CREATE TABLE channel_peers (
	binding_id text NOT NULL,
	dot_uid text NOT NULL,
	-- The channel's stable id of the person (a Telegram numeric user id),
	-- never a name they can change.
	peer_id text NOT NULL,
	-- The private chat they paired from: where answers and prompts go.
	chat_id text NOT NULL,
	role text NOT NULL CHECK (role IN ('owner', 'user')),
	label text NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (binding_id, peer_id)
);
CREATE INDEX channel_peers_dot ON channel_peers (dot_uid);

CREATE TABLE channel_pairings (
	binding_id text NOT NULL,
	dot_uid text NOT NULL,
	code_hash bytea NOT NULL CHECK (length(code_hash) = 32),
	expires_at timestamptz NOT NULL,
	consumed_at timestamptz,
	PRIMARY KEY (binding_id, code_hash)
);
CREATE INDEX channel_pairings_dot ON channel_pairings (dot_uid);

-- Where the hub's reading of the Dot's log for a channel stands: the id of
-- the last event it dealt with, moved after a send succeeded, so a restart
-- resumes there. A new channel starts after the Dot's latest event: history
-- is not replayed into a chat.
CREATE TABLE channel_cursors (
	binding_id text PRIMARY KEY,
	dot_uid text NOT NULL,
	event_cursor bigint NOT NULL
);
CREATE INDEX channel_cursors_dot ON channel_cursors (dot_uid);
