//! Minimal checks on backend URLs given to the console (the full guard against private
//! addresses lives with the request path).

/// Why a URL was refused, as a phrase that completes "<field> ...".
pub fn check_backend_url(s: &str) -> Result<(), &'static str> {
    let rest = if let Some(r) = s.strip_prefix("https://") {
        r
    } else if let Some(r) = s.strip_prefix("http://") {
        r
    } else {
        return Err("must be an http:// or https:// URL");
    };
    if s.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err("must not contain spaces or control characters");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err("must not carry credentials (user:password@); put keys in api_key or headers");
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (h, tail) = bracketed.split_once(']').ok_or("has an unclosed [IPv6] host")?;
        match tail.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if tail.is_empty() => (h, None),
            None => return Err("has an invalid host"),
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if let Some(p) = port {
        if !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().map_or(true, |p| p == 0) {
            return Err("has an invalid port");
        }
    }
    if host.is_empty() {
        return Err("has no host");
    }
    if rest.contains('#') {
        return Err("must not have a #fragment");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_urls() {
        for u in [
            "https://api.dify.ai/v1",
            "http://127.0.0.1:5001/v1",
            "http://localhost:8080",
            "https://[::1]:8443/x?y=1",
            "https://[::1]/x",
        ] {
            assert_eq!(check_backend_url(u), Ok(()), "{u}");
        }
    }

    #[test]
    fn refuses_bad_urls() {
        for (u, why) in [
            ("ftp://x", "http"),
            ("api.dify.ai/v1", "http"),
            ("https://", "no host"),
            ("https://user:pw@host/", "credentials"),
            ("https://host:99999/", "port"),
            ("https://host:abc/", "port"),
            ("https://host/a b", "spaces"),
            ("https://host/#frag", "fragment"),
        ] {
            let err = check_backend_url(u).unwrap_err();
            assert!(err.contains(why), "{u}: {err}");
        }
    }
}
