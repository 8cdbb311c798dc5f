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
    ACCESS_TEAM_DOMAIN: Var, "The Cloudflare Access team domain the console trusts.";
    ACCESS_AUD: Var, "The Access application's audience tag.";
    ACCESS_ROLE: Var, "The console role of a caller Access signed in.";
    DEMO: Var, "`true` serves the demo backend under /demo/ (make dev only).";
    DB: Binding, "D1: the registry.";
    CACHE: Binding, "KV: server definitions, upstream sessions and tool lists.";
    TASKS: Binding, "Durable Objects: durable tasks.";
    OAUTH: Binding, "Durable Objects: OAuth tokens of upstream apps.";
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
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Every setting the Worker's code reads is in [`SETTINGS`]: the shell (the only Rust that
    /// reads the environment; the pure half takes values) names no upper-case string outside
    /// it, and `worker/*.mjs` reads no `env.NAME` outside it.
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

    #[test]
    fn the_scanners_see_reads() {
        assert_eq!(upper_case_literals(r#"setting(env, "NEW_ONE") "GET" "x_Y" "A""#), ["NEW_ONE", "GET", "A"]);
        assert_eq!(env_reads("if (env.DEMO === 'true') x(env['OTHER'], myenv.NO, env.lower)"), ["DEMO", "OTHER"]);
    }
}
