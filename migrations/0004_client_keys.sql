-- Client authentication per server (issue 13, "who is calling"): the mode, and the client keys
-- of `key` servers. Keys are stored only as their SHA-256; the key itself is shown once.

ALTER TABLE mcp_servers ADD COLUMN auth_mode TEXT NOT NULL DEFAULT 'none' CHECK (auth_mode IN ('none', 'key'));

CREATE TABLE server_keys (
  id           TEXT PRIMARY KEY,
  server_id    TEXT NOT NULL REFERENCES mcp_servers (id) ON DELETE CASCADE,
  name         TEXT NOT NULL,                 -- who holds it: the caller identity sent to backends
  key_hash     TEXT NOT NULL UNIQUE,          -- SHA-256 hex of the key; the key itself is never stored
  hint         TEXT NOT NULL,                 -- its last 4 characters, for people
  created_at   INTEGER NOT NULL,              -- unix seconds
  last_used_at INTEGER,                       -- unix seconds, accurate to the hour; NULL until used
  UNIQUE (server_id, name)
);
