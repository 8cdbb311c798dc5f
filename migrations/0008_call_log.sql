-- The call log (issue 42): recent tools/call requests per server, successes included. Calls are
-- gathered in each isolate's memory and written with the usage flush (pure::call_log builds the
-- statements): never a write per call. Only the last 1000 calls of a server are kept.

CREATE TABLE call_log (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  server_id   TEXT NOT NULL,
  at          INTEGER NOT NULL,                -- unix milliseconds: when the call finished
  tool        TEXT NOT NULL,                   -- the tool name; '(unknown)' for a call naming no tool of the server
  caller_kind TEXT NOT NULL CHECK (caller_kind IN ('key', 'oauth', 'client', 'console')),
  caller      TEXT NOT NULL,                   -- the client key's name, the OAuth subject, the client's name, or the console user
  status      TEXT NOT NULL CHECK (status IN ('ok', 'tool_error', 'error', 'gone')),
  duration_ms INTEGER NOT NULL,
  streamed    INTEGER NOT NULL DEFAULT 0,      -- 1: answered as an SSE stream
  error       TEXT,                            -- what the client was told, at most 300 characters
  arguments   TEXT,                            -- only when the server records payloads: redacted JSON, clipped
  result      TEXT                             -- likewise
);
CREATE INDEX call_log_server_at ON call_log (server_id, at DESC, id DESC);

-- Whether a server's call log keeps arguments and results (secrets redacted); off by default.
ALTER TABLE mcp_servers ADD COLUMN call_log_payloads INTEGER NOT NULL DEFAULT 0;
