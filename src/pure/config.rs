//! Flowgate's own configuration: one table of every secret, variable and binding the code reads
//! ([`SETTINGS`]; the shell reads them through the constants it defines), and which `$NAME`
//! references a backend credential may make ([`RefPolicy`]). A backend may name a Worker secret
//! only when the deployment allows it, and never one of Flowgate's own (a console caller could
//! otherwise send `ADMIN_TOKEN` or `SECRETS_KEY` to a backend of their choosing).

/// What a setting is on the Worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `wrangler secret put NAME`.
    Secret,
    /// A plain-text variable (`[vars]` of wrangler.toml, the dashboard, `.dev.vars`).
    Var,
    /// A binding of wrangler.toml (D1, KV, Durable Objects, rate limiters).
    Binding,
}

/// One setting the code reads.
#[derive(Debug)]
pub struct Setting {
    pub name: &'static str,
    pub kind: Kind,
    pub meaning: &'static str,
}

/// Defines one `&str` constant a setting (its name) and the [`SETTINGS`] table, from one list:
/// the shell can only read a setting through a constant of this table.
macro_rules! settings {
    ($($name:ident: $kind:ident, $meaning:literal;)*) => {
        $(#[doc = $meaning] pub const $name: &str = stringify!($name);)*
        /// Every secret, variable and binding the code reads (the host test
        /// `every_setting_read_is_in_the_table` scans the sources for others).
        pub const SETTINGS: &[Setting] = &[$(Setting { name: $name, kind: Kind::$kind, meaning: $meaning }),*];
    };
}

settings! {
    ADMIN_TOKEN: Secret, "The console's admin bearer token.";
    SECRETS_KEY: Secret, "The key (64 hex characters) that seals literal backend credentials.";
    SECRETS_KEY_PREVIOUS: Secret, "The previous sealing key, during a rotation.";
    ALLOW_PRIVATE_BACKENDS: Var, "`true`, or the private hosts backends may be at.";
    ALLOWED_ORIGINS: Var, "Browser origins allowed to call the MCP endpoint.";
    LOG_REQUESTS: Var, "`all` logs every request, not only failures.";
    RATE_LIMIT_PERIOD_SECONDS: Var, "The period of the rate-limit bindings, for Retry-After.";
    PUBLIC_URL: Var, "The address MCP clients reach Flowgate at.";
    SECRET_REF_PREFIX: Var, "`$NAME` references starting with this prefix are allowed.";
    SECRET_REF_NAMES: Var, "`$NAME` references to these names (comma-separated) are allowed.";
    DEFINITION_MEMO_SECONDS: Var, "How long an isolate keeps a server definition in memory.";
    USAGE_FLUSH_SECONDS: Var, "How often usage counters are written to D1.";
    TASK_GRACE_SECONDS: Var, "How long a task that its TTL ended is kept (default 30).";
    TASK_MIN_TTL_SECONDS: Var, "Tests only: lowers the 1-minute floor of a task's TTL (1 to 60).";
    MAX_FILE_BYTES: Var, "The largest file a call uploads to Dify (default 10 MiB).";
    ACCESS_TEAM_DOMAIN: Var, "The Cloudflare Access team domain the console trusts.";
    ACCESS_AUD: Var, "The Access application's audience tag.";
    ACCESS_ROLE: Var, "The console role of a caller Access signed in.";
    DEMO: Var, "`true` serves the demo backend under /demo/ (make dev only).";
    DB: Binding, "D1: the registry.";
    CACHE: Binding, "KV: server definitions, upstream sessions and tool lists.";
    TASKS: Binding, "Durable Objects: durable tasks.";
    OAUTH: Binding, "Durable Objects: OAuth tokens of upstream apps.";
    BRIDGES: Binding, "Durable Objects: 2025 upstream calls held across a 2026-07-28 client's input rounds.";
    LEGACY_SESSIONS: Binding, "Durable Objects: legacy HTTP+SSE sessions with upstream apps.";
    CLIENT_SESSIONS: Binding, "Durable Objects: the standalone streams of clients that stay (subscriptions).";
    MCP_RATE_LIMIT: Binding, "Rate limiting: MCP requests per server code.";
    ADMIN_AUTH_LIMIT: Binding, "Rate limiting: wrong admin tokens per client address.";
}

/// True for a name of Flowgate's own configuration (compared without regard to case).
pub fn is_own_name(name: &str) -> bool {
    SETTINGS.iter().any(|s| s.name.eq_ignore_ascii_case(name))
}

/// Which `$NAME` references a backend credential may make: deny by default. A name is allowed
/// when it starts with `SECRET_REF_PREFIX` or is listed in `SECRET_REF_NAMES`, and is not one of
/// Flowgate's own; with neither set, none is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefPolicy {
    prefix: Option<String>,
    names: Vec<String>,
}

impl RefPolicy {
    /// From the `SECRET_REF_PREFIX` and `SECRET_REF_NAMES` settings (names separated by commas
    /// or spaces, a leading `$` ignored; blank values count as unset).
    pub fn from_settings(prefix: Option<&str>, names: Option<&str>) -> RefPolicy {
        let prefix = prefix.map(str::trim).filter(|p| !p.is_empty()).map(str::to_string);
        let names = names
            .unwrap_or_default()
            .split(|c: char| c == ',' || c.is_whitespace())
            .map(|n| n.trim_start_matches('$'))
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        RefPolicy { prefix, names }
    }

    /// Why a backend credential may not refer to `$name`, completing "… refers to $NAME, …";
    /// `None` when it may.
    pub fn problem(&self, name: &str) -> Option<String> {
        if is_own_name(name) {
            return Some(
                "which is Flowgate's own configuration and is never sent to a backend; put the backend's \
                 credential in a secret of its own (wrangler secret put BACKEND_API_KEY) and refer to that"
                    .to_string(),
            );
        }
        if self.names.iter().any(|n| n == name) || self.prefix.as_deref().is_some_and(|p| name.starts_with(p)) {
            return None;
        }
        Some(match &self.prefix {
            None if self.names.is_empty() => format!(
                "but this Worker allows no $NAME references until an admin allows them: set the \
                 SECRET_REF_PREFIX variable (e.g. BACKEND_, then store the secret as BACKEND_{name}) \
                 or list {name} in the SECRET_REF_NAMES variable"
            ),
            None => format!(
                "but this Worker allows only the $NAME references listed in the SECRET_REF_NAMES \
                 variable; add {name} to it"
            ),
            Some(p) => format!(
                "but on this Worker backend credentials may only refer to secrets whose names start with \
                 {p} (SECRET_REF_PREFIX) or are listed in SECRET_REF_NAMES; store it as {p}{name} and \
                 refer to ${p}{name}, or list {name} in SECRET_REF_NAMES"
            ),
        })
    }
}

/// `DEFINITION_MEMO_SECONDS` when unset or not a number.
pub const DEFAULT_MEMO_SECONDS: u64 = 5;
/// Longest `DEFINITION_MEMO_SECONDS` an operator may choose (larger values are cut to it).
pub const MAX_MEMO_SECONDS: u64 = 300;
/// `USAGE_FLUSH_SECONDS` when unset or not a number.
pub const DEFAULT_FLUSH_SECONDS: u64 = 60;
/// `MAX_FILE_BYTES` when unset or not a number: 10 MiB (Dify's own default limit for images).
pub const DEFAULT_MAX_FILE_BYTES: usize = 10 << 20;
/// `RATE_LIMIT_PERIOD_SECONDS` when unset or not a number.
pub const DEFAULT_RATE_LIMIT_PERIOD_SECONDS: u64 = 60;

/// Every variable and secret of [`SETTINGS`] the Rust code uses, each parsed once, with its
/// default and bounds ([`Settings::read`]); the shell keeps one per isolate
/// (`shell::platform::settings`). Bindings are not values: they stay names of the table. `DEMO`
/// is read by `worker/dev.mjs` alone. No `Debug`: it holds the admin token and sealing keys.
pub struct Settings {
    /// `ADMIN_TOKEN` as set; `pure::admin::check` judges it (unset, blank, too short).
    pub admin_token: Option<String>,
    /// `SECRETS_KEY`, then `SECRETS_KEY_PREVIOUS`, each when set and not blank. `Err` names the
    /// first of them that is not a key, and why.
    pub sealing_keys: Result<Vec<[u8; 32]>, String>,
    /// `ALLOW_PRIVATE_BACKENDS`.
    pub allow_private_backends: crate::pure::url::PrivateAllow,
    /// `ALLOWED_ORIGINS`: its entries (`pure::origin::allowed_origins`).
    pub allowed_origins: Vec<String>,
    /// `LOG_REQUESTS` is exactly `all`.
    pub log_all_requests: bool,
    /// `RATE_LIMIT_PERIOD_SECONDS` (default 60).
    pub rate_limit_period_seconds: u64,
    /// `PUBLIC_URL` as set: checked where it is used ([`public_base`], [`oauth_public_base`]),
    /// whose errors name the request that needed it.
    pub public_url: Option<String>,
    /// `SECRET_REF_PREFIX` and `SECRET_REF_NAMES`.
    pub ref_policy: RefPolicy,
    /// `DEFINITION_MEMO_SECONDS` (default 5, at most 300, 0: off).
    pub definition_memo_seconds: u64,
    /// `USAGE_FLUSH_SECONDS` (default 60, 0: every request).
    pub usage_flush_seconds: u64,
    /// `TASK_GRACE_SECONDS` in ms (`pure::task::grace_ms_setting`: default 30 s, capped).
    pub task_grace_ms: u64,
    /// `TASK_MIN_TTL_SECONDS` in ms (`pure::protocol::tasks::min_ttl_ms_setting`: tests only;
    /// unset, the protocol's 1-minute floor).
    pub task_min_ttl_ms: u64,
    /// `MAX_FILE_BYTES` (default 10 MiB): every file a call uploads to Dify is at most this
    /// long (and within the app's own limits, `pure::backend::dify::files::size_cap`).
    pub max_file_bytes: usize,
    /// `ACCESS_TEAM_DOMAIN`, `ACCESS_AUD`, `ACCESS_ROLE`: `Ok(None)` when Access is off, `Err`
    /// says what to fix in a half or wrong configuration.
    pub access: Result<Option<crate::pure::console_access::AccessConfig>, String>,
}

impl Settings {
    /// Reads every setting through `get` (a name to its value, `None`: not set) and parses
    /// each. A number that does not parse (after trimming) counts as unset; nothing fails here:
    /// a wrong sealing key or Access configuration is kept as the `Err` its use reports.
    pub fn read(get: impl Fn(&str) -> Option<String>) -> Settings {
        let number = |name: &str, default: u64| get(name).and_then(|v| v.trim().parse().ok()).unwrap_or(default);
        let mut sealing_keys = Ok(Vec::new());
        for name in [SECRETS_KEY, SECRETS_KEY_PREVIOUS] {
            let Some(k) = get(name).filter(|k| !k.trim().is_empty()) else { continue };
            if let Ok(keys) = &mut sealing_keys {
                match crate::pure::sealed::parse_key(&k) {
                    Ok(key) => keys.push(key),
                    Err(e) => sealing_keys = Err(format!("the {name} secret {e}")),
                }
            }
        }
        Settings {
            admin_token: get(ADMIN_TOKEN),
            sealing_keys,
            allow_private_backends: crate::pure::url::PrivateAllow::from_setting(
                get(ALLOW_PRIVATE_BACKENDS).as_deref(),
            ),
            allowed_origins: crate::pure::origin::allowed_origins(get(ALLOWED_ORIGINS).as_deref()),
            log_all_requests: get(LOG_REQUESTS).is_some_and(|v| v == "all"),
            rate_limit_period_seconds: number(RATE_LIMIT_PERIOD_SECONDS, DEFAULT_RATE_LIMIT_PERIOD_SECONDS),
            public_url: get(PUBLIC_URL),
            ref_policy: RefPolicy::from_settings(get(SECRET_REF_PREFIX).as_deref(), get(SECRET_REF_NAMES).as_deref()),
            definition_memo_seconds: number(DEFINITION_MEMO_SECONDS, DEFAULT_MEMO_SECONDS).min(MAX_MEMO_SECONDS),
            usage_flush_seconds: number(USAGE_FLUSH_SECONDS, DEFAULT_FLUSH_SECONDS),
            task_grace_ms: crate::pure::task::grace_ms_setting(get(TASK_GRACE_SECONDS).as_deref()),
            task_min_ttl_ms: crate::pure::protocol::tasks::min_ttl_ms_setting(get(TASK_MIN_TTL_SECONDS).as_deref()),
            max_file_bytes: usize::try_from(number(MAX_FILE_BYTES, DEFAULT_MAX_FILE_BYTES as u64))
                .unwrap_or(DEFAULT_MAX_FILE_BYTES),
            access: crate::pure::console_access::config(
                get(ACCESS_TEAM_DOMAIN).as_deref(),
                get(ACCESS_AUD).as_deref(),
                get(ACCESS_ROLE).as_deref(),
            ),
        }
    }
}

/// The base of the MCP URLs the console shows: the `PUBLIC_URL` variable when it is set (its
/// trailing slashes dropped), else the origin the console request came to. `Err` says what is
/// wrong with a `PUBLIC_URL` that is set but unusable.
pub fn public_base(public_url: Option<&str>, request_origin: &str) -> Result<String, String> {
    let Some(raw) = public_url.map(str::trim).filter(|u| !u.is_empty()) else {
        return Ok(request_origin.trim_end_matches('/').to_string());
    };
    let fix = "set it to the address MCP clients reach this Worker at, e.g. https://flowgate.example.com";
    let url = crate::pure::web_url::Url::parse(raw)
        .map_err(|e| format!("the PUBLIC_URL variable is not a URL ({e}); {fix}"))?;
    if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() {
        return Err(format!("the PUBLIC_URL variable must be an http or https URL; {fix}"));
    }
    if !url.username().is_empty() || url.password().is_some() || url.query().is_some() || url.fragment().is_some() {
        return Err(format!("the PUBLIC_URL variable must not carry credentials, a query or a fragment; {fix}"));
    }
    Ok(raw.trim_end_matches('/').to_string())
}

/// The base of an `oauth` server's resource URL (its tokens' audience, its metadata address):
/// `PUBLIC_URL` alone. The request's `Host` header is the client's to choose, so a token minted
/// for another deployment's address would otherwise pass here.
pub fn oauth_public_base(public_url: Option<&str>) -> Result<String, String> {
    if public_url.map(str::trim).is_none_or(str::is_empty) {
        return Err("this MCP server uses OAuth, whose token audience and metadata address come from \
                    the PUBLIC_URL variable, which is not set; its administrator sets PUBLIC_URL to the \
                    address MCP clients reach this Worker at, e.g. https://flowgate.example.com"
            .to_string());
    }
    public_base(public_url, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_url() {
        let here = "http://127.0.0.1:8787";
        assert_eq!(public_base(None, here).unwrap(), here);
        assert_eq!(public_base(Some(""), here).unwrap(), here);
        assert_eq!(public_base(Some("https://flowgate.example.com"), here).unwrap(), "https://flowgate.example.com");
        assert_eq!(public_base(Some("https://flowgate.example.com/"), here).unwrap(), "https://flowgate.example.com");
        // Behind a proxy that mounts Flowgate under a path.
        assert_eq!(
            public_base(Some("https://gw.example.com/flowgate/"), here).unwrap(),
            "https://gw.example.com/flowgate"
        );
        for bad in [
            "flowgate.example.com",
            "ftp://x.example",
            "https://u:p@x.example",
            "https://x.example/?a=1",
            "https://x.example/#f",
        ] {
            let e = public_base(Some(bad), here).unwrap_err();
            assert!(
                e.starts_with("the PUBLIC_URL variable") && e.contains("https://flowgate.example.com"),
                "{bad}: {e}"
            );
        }
    }

    fn allow(prefix: Option<&str>, names: Option<&str>) -> RefPolicy {
        RefPolicy::from_settings(prefix, names)
    }

    #[test]
    fn oauth_servers_need_the_public_url() {
        for unset in [None, Some(""), Some("  ")] {
            let e = oauth_public_base(unset).unwrap_err();
            assert!(e.contains("PUBLIC_URL variable, which is not set"), "{e}");
        }
        assert_eq!(oauth_public_base(Some("https://fg.example/")).unwrap(), "https://fg.example");
        assert!(oauth_public_base(Some("fg.example")).unwrap_err().starts_with("the PUBLIC_URL variable"));
    }

    #[test]
    fn own_names_are_refused_in_any_case() {
        let everything = allow(Some("A"), Some("ADMIN_TOKEN DB DEMO"));
        for n in ["ADMIN_TOKEN", "SECRETS_KEY", "secrets_key_previous", "DB", "Admin_Auth_Limit", "PUBLIC_URL", "DEMO"]
        {
            assert!(everything.problem(n).is_some_and(|m| m.contains("own configuration")), "{n}");
        }
        // Every row of the table, the ones the first list missed included.
        for s in SETTINGS {
            assert!(
                allow(Some(&s.name[..1]), None).problem(s.name).unwrap().contains("own configuration"),
                "{}",
                s.name
            );
        }
        for n in ["ACCESS_AUD", "ACCESS_TEAM_DOMAIN", "ACCESS_ROLE", "DEFINITION_MEMO_SECONDS", "USAGE_FLUSH_SECONDS"] {
            assert!(is_own_name(n), "{n}");
        }
        assert_eq!(allow(Some("ADMIN"), None).problem("ADMIN_TOKEN_2"), None);
    }

    #[test]
    fn references_are_denied_by_default() {
        for unset in [allow(None, None), allow(Some("  "), Some(" , ")), RefPolicy::default()] {
            let m = unset.problem("DIFY_KEY").unwrap();
            assert!(
                m.contains("allows no $NAME references")
                    && m.contains("SECRET_REF_PREFIX")
                    && m.contains("list DIFY_KEY in the SECRET_REF_NAMES"),
                "{m}"
            );
        }
    }

    #[test]
    fn the_prefix_rule() {
        let p = allow(Some("BACKEND_"), None);
        assert_eq!(p.problem("BACKEND_DIFY"), None);
        let m = p.problem("DIFY").unwrap();
        assert!(m.contains("start with BACKEND_") && m.contains("$BACKEND_DIFY"), "{m}");
        // Case matters: Worker names are case-sensitive.
        assert!(p.problem("backend_dify").is_some());
        // The own names stay refused even when they carry the prefix.
        assert!(allow(Some("SECRETS_"), None).problem("SECRETS_KEY").unwrap().contains("own configuration"));
    }

    #[test]
    fn the_list_of_names() {
        let l = allow(None, Some("DIFY_KEY, $TEAM_KEY\nOTHER"));
        for n in ["DIFY_KEY", "TEAM_KEY", "OTHER"] {
            assert_eq!(l.problem(n), None, "{n}");
        }
        let m = l.problem("DIFY").unwrap();
        assert!(m.contains("listed in the SECRET_REF_NAMES") && m.contains("add DIFY"), "{m}");
        assert!(l.problem("dify_key").is_some());
        // With a prefix too: either allows.
        let both = allow(Some("BACKEND_"), Some("DIFY_KEY"));
        assert_eq!(both.problem("DIFY_KEY"), None);
        assert_eq!(both.problem("BACKEND_X"), None);
        assert!(both.problem("X").unwrap().contains("or list X in SECRET_REF_NAMES"));
        assert!(allow(None, Some("SECRETS_KEY")).problem("SECRETS_KEY").unwrap().contains("own configuration"));
    }

    /// [`Settings::read`] with these settings set (`name=value`), nothing else.
    fn read(set: &[(&str, &str)]) -> Settings {
        Settings::read(|name| set.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn settings_unset_take_their_defaults() {
        let s = read(&[]);
        assert_eq!(s.admin_token, None);
        assert_eq!(s.sealing_keys, Ok(vec![]));
        assert_eq!(s.allow_private_backends, crate::pure::url::PrivateAllow::Nothing);
        assert_eq!(s.allowed_origins, [""]);
        assert!(!s.log_all_requests);
        assert_eq!(s.rate_limit_period_seconds, 60);
        assert_eq!(s.public_url, None);
        assert_eq!(s.ref_policy, RefPolicy::default());
        assert_eq!(s.definition_memo_seconds, 5);
        assert_eq!(s.usage_flush_seconds, 60);
        assert_eq!(s.access, Ok(None));
        assert_eq!(s.max_file_bytes, 10 << 20);
        assert_eq!(read(&[(MAX_FILE_BYTES, " 2048 ")]).max_file_bytes, 2048);
        assert_eq!(read(&[(MAX_FILE_BYTES, "lots")]).max_file_bytes, 10 << 20);
    }

    #[test]
    fn settings_numbers_parse_trimmed_and_fall_back_to_their_defaults() {
        let s =
            read(&[(RATE_LIMIT_PERIOD_SECONDS, " 10 "), (DEFINITION_MEMO_SECONDS, "0"), (USAGE_FLUSH_SECONDS, "0")]);
        assert_eq!((s.rate_limit_period_seconds, s.definition_memo_seconds, s.usage_flush_seconds), (10, 0, 0));
        // Not a whole non-negative number: as if unset.
        for bad in ["", " ", "abc", "-1", "1.5", "1e3", "99999999999999999999", "+"] {
            let s =
                read(&[(RATE_LIMIT_PERIOD_SECONDS, bad), (DEFINITION_MEMO_SECONDS, bad), (USAGE_FLUSH_SECONDS, bad)]);
            assert_eq!(
                (s.rate_limit_period_seconds, s.definition_memo_seconds, s.usage_flush_seconds),
                (DEFAULT_RATE_LIMIT_PERIOD_SECONDS, DEFAULT_MEMO_SECONDS, DEFAULT_FLUSH_SECONDS),
                "{bad:?}"
            );
        }
        // `+7` is a number to Rust's parser, as it was to each reader before.
        assert_eq!(read(&[(USAGE_FLUSH_SECONDS, "+7")]).usage_flush_seconds, 7);
    }

    #[test]
    fn the_definition_memo_is_cut_to_its_bound() {
        for (set, got) in [("299", 299), ("300", 300), ("301", 300), ("18446744073709551615", 300)] {
            assert_eq!(read(&[(DEFINITION_MEMO_SECONDS, set)]).definition_memo_seconds, got, "{set}");
        }
        // The other numbers have no bound (as before).
        let s = read(&[(USAGE_FLUSH_SECONDS, "86400"), (RATE_LIMIT_PERIOD_SECONDS, "3600")]);
        assert_eq!((s.usage_flush_seconds, s.rate_limit_period_seconds), (86400, 3600));
    }

    #[test]
    fn request_logging_needs_exactly_all() {
        assert!(read(&[(LOG_REQUESTS, "all")]).log_all_requests);
        for other in ["", "ALL", " all", "all ", "true", "errors"] {
            assert!(!read(&[(LOG_REQUESTS, other)]).log_all_requests, "{other:?}");
        }
    }

    #[test]
    fn the_sealing_keys() {
        let key = crate::pure::sealed::parse_key(KEY).unwrap();
        let other = [7u8; 32];
        let other_b64 = crate::pure::base64::encode(other);
        let keys = |set: &[(&str, &str)]| read(set).sealing_keys;
        assert_eq!(keys(&[(SECRETS_KEY, KEY)]), Ok(vec![key]));
        // The current key first, then the previous one; blank ones are unset.
        assert_eq!(keys(&[(SECRETS_KEY, KEY), (SECRETS_KEY_PREVIOUS, &other_b64)]), Ok(vec![key, other]));
        assert_eq!(keys(&[(SECRETS_KEY, " \n"), (SECRETS_KEY_PREVIOUS, KEY)]), Ok(vec![key]));
        assert_eq!(keys(&[(SECRETS_KEY, &format!(" {KEY}\n"))]), Ok(vec![key]));
        // A wrong key is an error naming it (the first wrong one), never its value.
        let e = keys(&[(SECRETS_KEY, "abc"), (SECRETS_KEY_PREVIOUS, "def")]).unwrap_err();
        assert!(e.starts_with("the SECRETS_KEY secret must be"), "{e}");
        let e = keys(&[(SECRETS_KEY, KEY), (SECRETS_KEY_PREVIOUS, &KEY[..62])]).unwrap_err();
        assert!(e.starts_with("the SECRETS_KEY_PREVIOUS secret must be") && !e.contains(&KEY[..62]), "{e}");
    }

    #[test]
    fn settings_kept_as_written_and_parsed_lists() {
        use crate::pure::url::PrivateAllow;
        let s = read(&[
            (ADMIN_TOKEN, " token "),
            (PUBLIC_URL, "https://fg.example/"),
            (ALLOWED_ORIGINS, "https://a.example, *"),
            (ALLOW_PRIVATE_BACKENDS, "TRUE"),
            (SECRET_REF_PREFIX, "BACKEND_"),
            (SECRET_REF_NAMES, "DIFY_KEY, $TEAM_KEY"),
        ]);
        // Judged where they are used (`pure::admin::check`, `public_base`), as they were.
        assert_eq!(s.admin_token.as_deref(), Some(" token "));
        assert_eq!(s.public_url.as_deref(), Some("https://fg.example/"));
        assert_eq!(s.allowed_origins, ["https://a.example", "*"]);
        assert_eq!(s.allow_private_backends, PrivateAllow::Everything);
        assert_eq!(s.ref_policy, RefPolicy::from_settings(Some("BACKEND_"), Some("DIFY_KEY, $TEAM_KEY")));
        assert_eq!(s.ref_policy.problem("TEAM_KEY"), None);
        for (set, allow) in [
            ("false", PrivateAllow::Nothing),
            (" ", PrivateAllow::Nothing),
            ("localhost, 10.0.0.1", PrivateAllow::from_setting(Some("localhost,10.0.0.1"))),
        ] {
            assert_eq!(read(&[(ALLOW_PRIVATE_BACKENDS, set)]).allow_private_backends, allow, "{set}");
        }
        assert!(read(&[(ALLOW_PRIVATE_BACKENDS, "localhost")]).allow_private_backends.allows("localhost"));
    }

    #[test]
    fn the_access_settings() {
        let access = |set: &[(&str, &str)]| read(set).access;
        let on =
            access(&[(ACCESS_TEAM_DOMAIN, "team.cloudflareaccess.com"), (ACCESS_AUD, "aud-tag")]).unwrap().unwrap();
        assert_eq!((on.audience.as_str(), on.role), ("aud-tag", crate::pure::console_roles::Role::Admin));
        assert_eq!(on.settings.issuer, "https://team.cloudflareaccess.com");
        let e = access(&[(ACCESS_TEAM_DOMAIN, "team.cloudflareaccess.com")]).unwrap_err();
        assert!(e.starts_with("ACCESS_TEAM_DOMAIN is set but ACCESS_AUD is not"), "{e}");
        let e = access(&[(ACCESS_TEAM_DOMAIN, "t.example"), (ACCESS_AUD, "a"), (ACCESS_ROLE, "root")]).unwrap_err();
        assert!(e.starts_with("ACCESS_ROLE must be"), "{e}");
        // The role alone does not turn Access on.
        assert_eq!(access(&[(ACCESS_ROLE, "viewer")]), Ok(None));
    }

    /// The settings are read by the names of the table: every variable and secret of it
    /// (`DEMO` aside: `worker/dev.mjs` reads it), each once, and no other name.
    #[test]
    fn settings_read_every_name_of_the_table_once() {
        let asked = std::cell::RefCell::new(Vec::new());
        let _ = Settings::read(|name| {
            asked.borrow_mut().push(name.to_string());
            None
        });
        let mut asked = asked.into_inner();
        asked.sort();
        let mut expected: Vec<String> =
            SETTINGS.iter().filter(|s| s.kind != Kind::Binding && s.name != DEMO).map(|s| s.name.to_string()).collect();
        expected.sort();
        assert_eq!(asked, expected);
    }

    /// Every binding and variable of wrangler.toml is on the list, so a new one cannot be
    /// forgotten here.
    #[test]
    fn the_list_covers_wrangler_toml() {
        let toml = include_str!("../../wrangler.toml");
        let mut in_vars = false;
        for line in toml.lines().map(str::trim) {
            if line.starts_with('[') {
                in_vars = line == "[vars]";
                continue;
            }
            let Some((key, value)) = line.split_once('=') else { continue };
            let (key, value) = (key.trim(), value.trim().trim_matches('"'));
            let name = match key {
                "binding" | "name" if !line.starts_with('#') => value,
                k if in_vars && !k.starts_with('#') => k,
                _ => continue,
            };
            if name == "flowgate" {
                continue; // the Worker's own name and its database's name
            }
            assert!(is_own_name(name), "{name} (wrangler.toml) is missing from pure::config::SETTINGS");
        }
    }

    /// Upper-case string literals of the shell that are not settings (`extern "C"`, HTTP
    /// methods, SQL, Cargo's variables).
    const NOT_SETTINGS: [&str; 10] =
        ["C", "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "UNIQUE", "CARGO_PKG_VERSION"];

    /// The upper-case string literals of Rust source (`"ADMIN_TOKEN"`): how a setting is named
    /// when it is read without one of the table's constants.
    fn upper_case_literals(src: &str) -> Vec<&str> {
        let b = src.as_bytes();
        let mut out = Vec::new();
        for (i, _) in src.match_indices('"') {
            let run =
                b[i + 1..].iter().take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || **c == b'_').count();
            if run > 0 && b[i + 1].is_ascii_uppercase() && b.get(i + 1 + run) == Some(&b'"') {
                out.push(&src[i + 1..i + 1 + run]);
            }
        }
        out
    }

    /// The names a JavaScript module reads from the Worker's `env` (`env.DEMO`, `env['X']`).
    fn env_reads(src: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for (i, _) in src.match_indices("env") {
            if src[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
                continue;
            }
            let rest = &src[i + 3..];
            let rest = rest.strip_prefix('.').or_else(|| rest.strip_prefix("['")).or_else(|| rest.strip_prefix("[\""));
            let Some(rest) = rest else { continue };
            let run = rest.bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
            if run > 0 && rest[..run].bytes().all(|c| !c.is_ascii_lowercase()) {
                out.push(&rest[..run]);
            }
        }
        out
    }

    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            // The shell's host tests set settings and name key algorithms: they read nothing.
            if path.is_dir() && !path.ends_with("shell/tests") {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Every setting the Worker's code reads is in [`SETTINGS`]: the shell (the only Rust that
    /// reads the environment; the pure half takes values; its host tests, which set settings,
    /// aside) names no upper-case string outside it, and `worker/*.mjs` reads no `env.NAME`
    /// outside it.
    #[test]
    fn every_setting_read_is_in_the_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut missing = Vec::new();
        let mut files = Vec::new();
        rust_files(&root.join("src/shell"), &mut files);
        files.push(root.join("src/lib.rs"));
        assert!(files.len() > 10, "the shell's sources were not found");
        for f in &files {
            let src = std::fs::read_to_string(f).unwrap();
            for name in upper_case_literals(&src) {
                if !NOT_SETTINGS.contains(&name) && !SETTINGS.iter().any(|s| s.name == name) {
                    missing.push(format!("{name} ({})", f.strip_prefix(root).unwrap().display()));
                }
            }
        }
        let mut modules = 0;
        for entry in std::fs::read_dir(root.join("worker")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "mjs") {
                modules += 1;
                let src = std::fs::read_to_string(&path).unwrap();
                for name in env_reads(&src) {
                    if !SETTINGS.iter().any(|s| s.name == name) {
                        missing.push(format!("{name} ({})", path.strip_prefix(root).unwrap().display()));
                    }
                }
            }
        }
        assert!(modules >= 2, "worker/*.mjs were not found");
        assert!(missing.is_empty(), "settings read but missing from pure::config::SETTINGS: {missing:?}");
    }

    /// The shell reads the Worker's vars and secrets in one place: the runtime's `setting` is
    /// called by `shell/platform.rs` alone (`settings`, parsed once into [`Settings`], and
    /// `named_value`, a backend credential's `$NAME`), and `named_value` by `shell/secrets.rs`
    /// alone. A read anywhere else (`env.runtime().setting(…)`) is an ad-hoc read: it fails here.
    #[test]
    fn settings_are_read_in_one_place() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        rust_files(&root.join("src/shell"), &mut files);
        rust_files(&root.join("src/runtime"), &mut files);
        files.push(root.join("src/lib.rs"));
        let readers: [(&str, &[&str]); 3] = [
            (".setting(", &["src/shell/platform.rs"]),
            ("::setting(", &["src/shell/platform.rs"]),
            ("named_value(", &["src/shell/platform.rs", "src/shell/secrets.rs"]),
        ];
        let mut ad_hoc = Vec::new();
        let mut seen = 0;
        for f in &files {
            let shown = f.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            let src = std::fs::read_to_string(f).unwrap();
            for (call, allowed) in readers {
                let n = src.matches(call).count();
                if allowed.contains(&shown.as_str()) {
                    seen += n;
                } else if n > 0 {
                    ad_hoc.push(format!("{call}…) in {shown}"));
                }
            }
        }
        assert!(seen >= 3, "the reads of shell/platform.rs and shell/secrets.rs were not found");
        assert!(ad_hoc.is_empty(), "settings read outside shell::platform::settings: {ad_hoc:?}");
    }

    /// The settings table of docs/configuration.md names every row of [`SETTINGS`], and no other setting.
    #[test]
    fn the_docs_list_every_setting() {
        let page = include_str!("../../docs/configuration.md");
        let section = page.split("\n## Settings\n").nth(1).expect("docs/configuration.md has a Settings section");
        let section = section.split("\n## ").next().unwrap_or_default();
        let mut listed = Vec::new();
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            let first = row[1..].split('|').next().unwrap_or_default();
            listed.extend(first.split('`').skip(1).step_by(2).filter(|n| !n.starts_with('$')));
        }
        for s in SETTINGS {
            assert!(listed.contains(&s.name), "{} is missing from the table of docs/configuration.md", s.name);
        }
        for name in listed {
            assert!(
                SETTINGS.iter().any(|s| s.name == name),
                "the table of docs/configuration.md lists {name}, which is not in SETTINGS"
            );
        }
    }

    #[test]
    fn the_scanners_see_reads() {
        assert_eq!(upper_case_literals(r#"setting(env, "NEW_ONE") "GET" "x_Y" "A""#), ["NEW_ONE", "GET", "A"]);
        assert_eq!(env_reads("if (env.DEMO === 'true') x(env['OTHER'], myenv.NO, env.lower)"), ["DEMO", "OTHER"]);
    }
}
