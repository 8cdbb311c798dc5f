-- Durable tasks: one row per task, kept current by the task's Durable Object; serves the console
-- listing. The Durable Object's own storage is the authority while the task lives.

CREATE TABLE tasks (
  id                 TEXT PRIMARY KEY,              -- the MCP taskId (128 random bits, hex)
  server_id          TEXT NOT NULL,
  app_id             TEXT NOT NULL,
  tool               TEXT NOT NULL,
  status             TEXT NOT NULL,                 -- submitted | working | input_required | completed | failed | cancelled
  status_message     TEXT,
  created_at         INTEGER NOT NULL,              -- unix milliseconds
  updated_at         INTEGER NOT NULL,
  poll_count         INTEGER NOT NULL DEFAULT 0,
  consecutive_errors INTEGER NOT NULL DEFAULT 0,
  last_error         TEXT,
  next_poll_at       INTEGER,
  degraded           INTEGER NOT NULL DEFAULT 0,
  cancel_requested   INTEGER NOT NULL DEFAULT 0,
  completed_at       INTEGER
);
CREATE INDEX tasks_server_created ON tasks (server_id, created_at DESC);
