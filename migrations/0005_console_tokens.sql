-- Named console tokens with roles (issue 13): who may call the console, and as what. Tokens are
-- stored only as their SHA-256; the token itself is shown once. ADMIN_TOKEN (a Worker secret)
-- stays the bootstrap admin and is not in this table.

CREATE TABLE console_tokens (
  id           TEXT PRIMARY KEY,
  name         TEXT NOT NULL UNIQUE,          -- who holds it; the audit log's actor is "token:<name>"
  role         TEXT NOT NULL CHECK (role IN ('admin', 'publisher', 'viewer')),
  token_hash   TEXT NOT NULL UNIQUE,          -- SHA-256 hex of the token; the token itself is never stored
  hint         TEXT NOT NULL,                 -- its last 4 characters, for people
  created_by   TEXT NOT NULL,                 -- the actor that created it
  created_at   INTEGER NOT NULL,              -- unix seconds
  last_used_at INTEGER                        -- unix seconds, accurate to the hour; NULL until used
);
