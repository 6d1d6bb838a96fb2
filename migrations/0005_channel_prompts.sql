-- Where each approval prompt a channel sent is (ref 9.8), so every outcome,
-- whoever gave it, edits the prompts to say it and takes their buttons
-- away. One row per approval and person; settled once edited.

CREATE TABLE channel_prompts (
	binding_id text NOT NULL,
	dot_uid text NOT NULL,
	-- The guest's id of the request (approval.requested's approval_id).
	approval_id text NOT NULL,
	-- The task the call belongs to, '' for the chat: its end makes the
	-- prompt "No longer needed".
	task_id text NOT NULL DEFAULT '',
	peer_id text NOT NULL,
	chat_id text NOT NULL,
	-- The channel's id of the sent prompt, which an edit names.
	ref text NOT NULL,
	-- The prompt's words, kept to say them again with the outcome.
	body text NOT NULL,
	settled boolean NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (binding_id, approval_id, peer_id)
);
CREATE INDEX channel_prompts_dot ON channel_prompts (dot_uid);
CREATE INDEX channel_prompts_open ON channel_prompts (binding_id) WHERE NOT settled;
