-- A server URL that can be shown again, and rotation with a grace period (issue 42).
-- `code_sealed`: the server code sealed under SECRETS_KEY (AES-256-GCM, `enc:v1:…`, bound to the
-- server's id), opened only for an admin's reveal; NULL for codes drawn before this migration or
-- while SECRETS_KEY was not set. A D1 export alone reveals no code.
ALTER TABLE mcp_servers ADD COLUMN code_sealed TEXT;
-- The code before the last rotation, while it still works (a rotation's `grace_seconds`): its
-- SHA-256, its last 4 characters, and when it stops (unix milliseconds). Never the code.
ALTER TABLE mcp_servers ADD COLUMN previous_code_hash TEXT;
ALTER TABLE mcp_servers ADD COLUMN previous_code_hint TEXT;
ALTER TABLE mcp_servers ADD COLUMN previous_code_until_ms INTEGER;
CREATE UNIQUE INDEX mcp_servers_previous_code ON mcp_servers (previous_code_hash);
