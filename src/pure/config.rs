//! Flowgate's own configuration: the names of its secrets, variables and bindings, and which
//! `$NAME` references a backend credential may make. A backend may name a Worker secret of its
//! own; it may never name one of Flowgate's (an admin could otherwise send `ADMIN_TOKEN` or
//! `SECRETS_KEY` to a backend of their choosing).

/// Secrets and variables Flowgate reads itself.
pub const OWN_SECRETS_AND_VARS: [&str; 9] = [
    "ADMIN_TOKEN",
    "SECRETS_KEY",
    "SECRETS_KEY_PREVIOUS",
    "ALLOW_PRIVATE_BACKENDS",
    "ALLOWED_ORIGINS",
    "LOG_REQUESTS",
    "RATE_LIMIT_PERIOD_SECONDS",
    "PUBLIC_URL",
    "SECRET_REF_PREFIX",
];

/// Bindings of wrangler.toml (D1, KV, Durable Objects, rate limiters).
pub const OWN_BINDINGS: [&str; 6] = ["DB", "CACHE", "TASKS", "OAUTH", "MCP_RATE_LIMIT", "ADMIN_AUTH_LIMIT"];

/// Optional variable: the address MCP clients reach Flowgate at (for `mcp_url`).
pub const PUBLIC_URL: &str = "PUBLIC_URL";

/// Optional variable: when set, `$NAME` references must start with it (e.g. `BACKEND_`).
pub const SECRET_REF_PREFIX: &str = "SECRET_REF_PREFIX";

/// True for a name of Flowgate's own configuration (compared without regard to case).
pub fn is_own_name(name: &str) -> bool {
    OWN_SECRETS_AND_VARS.iter().chain(OWN_BINDINGS.iter()).any(|n| n.eq_ignore_ascii_case(name))
}

/// Why a backend credential may not refer to `$name`, completing "… refers to $NAME, …";
/// `None` when it may. `prefix` is the `SECRET_REF_PREFIX` setting (empty means none).
pub fn reference_problem(name: &str, prefix: Option<&str>) -> Option<String> {
    if is_own_name(name) {
        return Some(
            "which is Flowgate's own configuration and is never sent to a backend; put the backend's \
             credential in a secret of its own (wrangler secret put BACKEND_API_KEY) and refer to that"
                .to_string(),
        );
    }
    match prefix.map(str::trim).filter(|p| !p.is_empty()) {
        Some(p) if !name.starts_with(p) => Some(format!(
            "but on this Worker backend credentials may only refer to secrets whose names start with \
             {p} (SECRET_REF_PREFIX); store it as {p}{name} and refer to ${p}{name}"
        )),
        _ => None,
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

    #[test]
    fn own_names_are_refused_in_any_case() {
        for n in ["ADMIN_TOKEN", "SECRETS_KEY", "secrets_key_previous", "DB", "Admin_Auth_Limit", "PUBLIC_URL"] {
            assert!(reference_problem(n, None).is_some_and(|m| m.contains("own configuration")), "{n}");
        }
        assert_eq!(reference_problem("DIFY_KEY", None), None);
        assert_eq!(reference_problem("ADMIN_TOKEN_2", None), None);
    }

    #[test]
    fn the_prefix_rule() {
        assert_eq!(reference_problem("BACKEND_DIFY", Some("BACKEND_")), None);
        assert_eq!(reference_problem("DIFY", Some("")), None);
        assert_eq!(reference_problem("DIFY", Some("  ")), None);
        let m = reference_problem("DIFY", Some("BACKEND_")).unwrap();
        assert!(m.contains("start with BACKEND_") && m.contains("$BACKEND_DIFY"), "{m}");
        // Case matters: Worker names are case-sensitive.
        assert!(reference_problem("backend_dify", Some("BACKEND_")).is_some());
        // The own names stay refused even when they carry the prefix's shape.
        assert!(reference_problem("SECRETS_KEY", Some("SECRETS_")).unwrap().contains("own configuration"));
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
            assert!(is_own_name(name), "{name} (wrangler.toml) is missing from pure::config");
        }
    }
}
