-- Console writes: who, what, when. Never bodies or secret values.

CREATE TABLE audit_log (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  at         INTEGER NOT NULL,              -- unix milliseconds
  request_id TEXT NOT NULL,                 -- the x-request-id of the write
  actor      TEXT NOT NULL,                 -- who (the admin token's identity; never the token)
  action     TEXT NOT NULL,                 -- e.g. "PUT /apps/{id}/server"
  target     TEXT,                          -- the id the action was on
  status     INTEGER NOT NULL               -- the HTTP status answered
);
CREATE INDEX audit_log_at ON audit_log (at DESC);
