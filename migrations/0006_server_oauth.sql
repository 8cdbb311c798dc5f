-- Client authentication mode `oauth` (issue 13): the server's issuer settings, and a mode column
-- that admits it. SQLite cannot widen the CHECK of `auth_mode` in place, and rebuilding
-- mcp_servers would cascade-delete its keys, app links and end users; so the mode moves to
-- `client_auth` (copied here) and `auth_mode` is no longer read or written.

ALTER TABLE mcp_servers ADD COLUMN client_auth TEXT NOT NULL DEFAULT 'none' CHECK (client_auth IN ('none', 'key', 'oauth'));
UPDATE mcp_servers SET client_auth = auth_mode;
-- JSON {issuer, audience?, scopes?, jwks_uri?} of an `oauth` server (pure::oauth_resource); NULL otherwise.
ALTER TABLE mcp_servers ADD COLUMN oauth TEXT;
