-- The log names a person's chat message message.user (the guest's inbound
-- event that carries it is user.message, in the outbox). The indexes of
-- 0001 that serve the conversation and channel messages are made again on
-- that name, and the log gets the index its type filters use (ref 9.6:
-- filtered in the database).

DROP INDEX IF EXISTS events_channel_origin;
CREATE UNIQUE INDEX events_channel_origin ON events (
	dot_uid, (data -> 'origin' ->> 'binding_id'), (data -> 'origin' ->> 'external_id'))
	WHERE type = 'message.user' AND data ? 'origin';

DROP INDEX IF EXISTS events_user_message;
CREATE INDEX events_message_user ON events (dot_uid, (data ->> 'message_id'))
	WHERE type = 'message.user';

-- A Dot's events of some types, in id order (the conversation, a family of
-- the activity log).
CREATE INDEX events_dot_type_id ON events (dot_uid, type, id);
