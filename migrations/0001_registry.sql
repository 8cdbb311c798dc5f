-- The registry: apps, MCP servers (hashed codes only), which apps a server exposes, end users.

CREATE TABLE apps (
  id              TEXT PRIMARY KEY,
  tenant_id       TEXT NOT NULL DEFAULT 'default',
  name            TEXT NOT NULL,
  description     TEXT NOT NULL DEFAULT '',
  mode            TEXT NOT NULL CHECK (mode IN ('workflow', 'chat', 'advanced-chat', 'agent-chat', 'completion', 'http-tool', 'mcp')),
  backend         TEXT NOT NULL,                 -- JSON; credentials are $NAME references or literals
  user_input_form TEXT NOT NULL DEFAULT '[]',    -- JSON, Dify's {"<type>": {...}} items
  outputs         TEXT NOT NULL DEFAULT '[]',    -- JSON, declared output variables
  created_at      INTEGER NOT NULL,              -- unix seconds
  updated_at      INTEGER NOT NULL
);
CREATE INDEX apps_tenant ON apps (tenant_id, created_at);

CREATE TABLE mcp_servers (
  id          TEXT PRIMARY KEY,
  tenant_id   TEXT NOT NULL DEFAULT 'default',
  app_id      TEXT REFERENCES apps (id) ON DELETE CASCADE, -- set for a Dify-style one-app server, NULL for a multi-app server
  name        TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  code_hash   TEXT NOT NULL UNIQUE,          -- SHA-256 hex of the server code; the code itself is never stored
  code_hint   TEXT NOT NULL,                 -- its last 4 characters, for people
  status      TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
  parameters  TEXT NOT NULL DEFAULT '{}',    -- JSON {variable: description}
  created_at  INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL,
  UNIQUE (tenant_id, app_id)
);

-- The apps each server exposes, in tool order (one row for a Dify-style server).
CREATE TABLE mcp_server_apps (
  server_id TEXT NOT NULL REFERENCES mcp_servers (id) ON DELETE CASCADE,
  app_id    TEXT NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
  position  INTEGER NOT NULL,
  PRIMARY KEY (server_id, app_id)
);
CREATE INDEX mcp_server_apps_app ON mcp_server_apps (app_id);

-- The `user` Flowgate sends to backends: one per server and client.
CREATE TABLE end_users (
  id           TEXT PRIMARY KEY,
  server_id    TEXT NOT NULL REFERENCES mcp_servers (id) ON DELETE CASCADE,
  session_key  TEXT NOT NULL,                -- stable per client (e.g. from clientInfo)
  name         TEXT NOT NULL,
  created_at   INTEGER NOT NULL,
  last_seen_at INTEGER NOT NULL,
  UNIQUE (server_id, session_key)
);
