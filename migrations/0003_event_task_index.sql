-- A task's story: a Dot's events that name the task (data.task_id, the one
-- place the contract puts it), in id order, for the log's task filter (ref
-- 9.6).
CREATE INDEX events_dot_task_id ON events (dot_uid, (data ->> 'task_id'), id);
