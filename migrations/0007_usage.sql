-- Usage metrics per server and tool (issue 15): counted in each isolate's memory and added
-- here at most once a minute per isolate (pure::usage builds the upserts). Minute rows are kept
-- 24 hours, hour rows and failures 30 days; only the last 50 failures per server are kept.

CREATE TABLE usage_minute (
  server_id    TEXT NOT NULL,
  tool         TEXT NOT NULL,                 -- the tool name; '(unknown)' for a call naming no tool of the server
  bucket       INTEGER NOT NULL,              -- unix seconds of the minute's start
  calls        INTEGER NOT NULL DEFAULT 0,
  errors       INTEGER NOT NULL DEFAULT 0,    -- JSON-RPC errors and results with isError
  streamed     INTEGER NOT NULL DEFAULT 0,    -- calls answered as an SSE stream
  callers      TEXT NOT NULL DEFAULT '[]',    -- JSON array of distinct caller hashes (16 hex), at most 64
  callers_full INTEGER NOT NULL DEFAULT 0,    -- 1: more than 64 distinct callers (the array is a sample)
  -- latency histogram: h<i> counts calls in the i-th fixed log-scale bucket (pure::usage::BOUNDS_MS)
  h0 INTEGER NOT NULL DEFAULT 0,
  h1 INTEGER NOT NULL DEFAULT 0,
  h2 INTEGER NOT NULL DEFAULT 0,
  h3 INTEGER NOT NULL DEFAULT 0,
  h4 INTEGER NOT NULL DEFAULT 0,
  h5 INTEGER NOT NULL DEFAULT 0,
  h6 INTEGER NOT NULL DEFAULT 0,
  h7 INTEGER NOT NULL DEFAULT 0,
  h8 INTEGER NOT NULL DEFAULT 0,
  h9 INTEGER NOT NULL DEFAULT 0,
  h10 INTEGER NOT NULL DEFAULT 0,
  h11 INTEGER NOT NULL DEFAULT 0,
  h12 INTEGER NOT NULL DEFAULT 0,
  h13 INTEGER NOT NULL DEFAULT 0,
  h14 INTEGER NOT NULL DEFAULT 0,
  h15 INTEGER NOT NULL DEFAULT 0,
  h16 INTEGER NOT NULL DEFAULT 0,
  h17 INTEGER NOT NULL DEFAULT 0,
  h18 INTEGER NOT NULL DEFAULT 0,
  h19 INTEGER NOT NULL DEFAULT 0,
  h20 INTEGER NOT NULL DEFAULT 0,
  h21 INTEGER NOT NULL DEFAULT 0,
  h22 INTEGER NOT NULL DEFAULT 0,
  h23 INTEGER NOT NULL DEFAULT 0,
  h24 INTEGER NOT NULL DEFAULT 0,
  h25 INTEGER NOT NULL DEFAULT 0,
  h26 INTEGER NOT NULL DEFAULT 0,
  h27 INTEGER NOT NULL DEFAULT 0,
  h28 INTEGER NOT NULL DEFAULT 0,
  h29 INTEGER NOT NULL DEFAULT 0,
  h30 INTEGER NOT NULL DEFAULT 0,
  h31 INTEGER NOT NULL DEFAULT 0,
  h32 INTEGER NOT NULL DEFAULT 0,
  h33 INTEGER NOT NULL DEFAULT 0,
  h34 INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (server_id, tool, bucket)
);
CREATE INDEX usage_minute_bucket ON usage_minute (bucket);

CREATE TABLE usage_hour (
  server_id    TEXT NOT NULL,
  tool         TEXT NOT NULL,                 -- the tool name; '(unknown)' for a call naming no tool of the server
  bucket       INTEGER NOT NULL,              -- unix seconds of the hour's start
  calls        INTEGER NOT NULL DEFAULT 0,
  errors       INTEGER NOT NULL DEFAULT 0,    -- JSON-RPC errors and results with isError
  streamed     INTEGER NOT NULL DEFAULT 0,    -- calls answered as an SSE stream
  callers      TEXT NOT NULL DEFAULT '[]',    -- JSON array of distinct caller hashes (16 hex), at most 64
  callers_full INTEGER NOT NULL DEFAULT 0,    -- 1: more than 64 distinct callers (the array is a sample)
  -- latency histogram: h<i> counts calls in the i-th fixed log-scale bucket (pure::usage::BOUNDS_MS)
  h0 INTEGER NOT NULL DEFAULT 0,
  h1 INTEGER NOT NULL DEFAULT 0,
  h2 INTEGER NOT NULL DEFAULT 0,
  h3 INTEGER NOT NULL DEFAULT 0,
  h4 INTEGER NOT NULL DEFAULT 0,
  h5 INTEGER NOT NULL DEFAULT 0,
  h6 INTEGER NOT NULL DEFAULT 0,
  h7 INTEGER NOT NULL DEFAULT 0,
  h8 INTEGER NOT NULL DEFAULT 0,
  h9 INTEGER NOT NULL DEFAULT 0,
  h10 INTEGER NOT NULL DEFAULT 0,
  h11 INTEGER NOT NULL DEFAULT 0,
  h12 INTEGER NOT NULL DEFAULT 0,
  h13 INTEGER NOT NULL DEFAULT 0,
  h14 INTEGER NOT NULL DEFAULT 0,
  h15 INTEGER NOT NULL DEFAULT 0,
  h16 INTEGER NOT NULL DEFAULT 0,
  h17 INTEGER NOT NULL DEFAULT 0,
  h18 INTEGER NOT NULL DEFAULT 0,
  h19 INTEGER NOT NULL DEFAULT 0,
  h20 INTEGER NOT NULL DEFAULT 0,
  h21 INTEGER NOT NULL DEFAULT 0,
  h22 INTEGER NOT NULL DEFAULT 0,
  h23 INTEGER NOT NULL DEFAULT 0,
  h24 INTEGER NOT NULL DEFAULT 0,
  h25 INTEGER NOT NULL DEFAULT 0,
  h26 INTEGER NOT NULL DEFAULT 0,
  h27 INTEGER NOT NULL DEFAULT 0,
  h28 INTEGER NOT NULL DEFAULT 0,
  h29 INTEGER NOT NULL DEFAULT 0,
  h30 INTEGER NOT NULL DEFAULT 0,
  h31 INTEGER NOT NULL DEFAULT 0,
  h32 INTEGER NOT NULL DEFAULT 0,
  h33 INTEGER NOT NULL DEFAULT 0,
  h34 INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (server_id, tool, bucket)
);
CREATE INDEX usage_hour_bucket ON usage_hour (bucket);

-- The last failures of each server: what the client was told (clipped), never the arguments.
CREATE TABLE usage_failures (
  id        INTEGER PRIMARY KEY AUTOINCREMENT,
  server_id TEXT NOT NULL,
  at        INTEGER NOT NULL,                 -- unix milliseconds
  tool      TEXT NOT NULL,
  message   TEXT NOT NULL                     -- at most 300 characters
);
CREATE INDEX usage_failures_server ON usage_failures (server_id, at);
CREATE INDEX usage_failures_at ON usage_failures (at);
