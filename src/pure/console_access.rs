//! Cloudflare Access as a way into the console: when the deployment sits behind an Access
//! application, Access signs each request it lets through (`Cf-Access-Jwt-Assertion`, RS256,
//! keys at `<team domain>/cdn-cgi/access/certs`, `aud` = the application's AUD tag), and that
//! signed assertion is the caller's console identity, with no token to paste. Configured by
//! `ACCESS_TEAM_DOMAIN` and `ACCESS_AUD` (both, or Access is off); `ACCESS_ROLE` is the role
//! Access users get (default `admin`: the Access policy already decides who gets in).

use super::console_roles::{Identity, Role};
use super::error::ApiError;
use super::oauth_resource::{OAuthSettings, TokenError};

/// The request header Access puts its signed assertion in.
pub const ASSERTION_HEADER: &str = "cf-access-jwt-assertion";

/// Where Access keys are, under the team domain.
const CERTS_PATH: &str = "/cdn-cgi/access/certs";

/// Access as this deployment configured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessConfig {
    /// The assertion's issuer (`https://<team>.cloudflareaccess.com`) and its keys, checked like
    /// an MCP server's OAuth tokens (`oauth_resource`).
    pub settings: OAuthSettings,
    /// The application's AUD tag: the assertion's `aud`.
    pub audience: String,
    pub role: Role,
}

/// The configuration from the three settings; `Ok(None)`: Access is off (neither set).
/// A half or wrong configuration is an error that says what to fix (the console answers 503
/// with it rather than silently ignoring Access).
pub fn config(
    team_domain: Option<&str>,
    aud: Option<&str>,
    role: Option<&str>,
) -> Result<Option<AccessConfig>, String> {
    let team_domain = team_domain.map(str::trim).filter(|s| !s.is_empty());
    let aud = aud.map(str::trim).filter(|s| !s.is_empty());
    let (domain, audience) = match (team_domain, aud) {
        (None, None) => return Ok(None),
        (Some(d), Some(a)) => (d, a),
        (Some(_), None) => return Err("ACCESS_TEAM_DOMAIN is set but ACCESS_AUD is not: set both (the AUD tag is on the Access application's overview page) or neither".into()),
        (None, Some(_)) => return Err("ACCESS_AUD is set but ACCESS_TEAM_DOMAIN is not: set both (e.g. ACCESS_TEAM_DOMAIN=myteam.cloudflareaccess.com) or neither".into()),
    };
    // A bare host means https; a full URL is taken as given (http only makes sense locally).
    let issuer = if domain.starts_with("https://") || domain.starts_with("http://") {
        domain.trim_end_matches('/').to_string()
    } else {
        format!("https://{}", domain.trim_end_matches('/'))
    };
    let host = issuer.split_once("://").map_or("", |(_, h)| h);
    if host.is_empty() || host.contains(['/', '?', '#', ' ', '@']) {
        return Err(format!("ACCESS_TEAM_DOMAIN must be a host such as myteam.cloudflareaccess.com (got {domain:?})"));
    }
    let role = match role.map(str::trim).filter(|s| !s.is_empty()) {
        None => Role::Admin,
        Some(r) => {
            Role::parse(r).ok_or_else(|| format!("ACCESS_ROLE must be admin, publisher or viewer (got {r:?})"))?
        }
    };
    let settings = OAuthSettings {
        jwks_uri: Some(format!("{issuer}{CERTS_PATH}")),
        issuer,
        audience: Some(audience.to_string()),
        scopes: Vec::new(),
    };
    Ok(Some(AccessConfig { settings, audience: audience.to_string(), role }))
}

/// The name an Access user goes by in the audit log: the assertion's `email` when it has one
/// (a person), else `sub`, the caller the assertion verified as (a service token has no email,
/// and its `common_name`, the token's Client ID, stands for the empty `sub`).
pub fn user_name(claims: &serde_json::Value, sub: &str) -> String {
    match claims.get("email").and_then(|e| e.as_str()).map(str::trim).filter(|e| !e.is_empty()) {
        Some(email) => email.chars().take(254).collect(),
        None => sub.to_string(),
    }
}

/// Why an assertion was refused, in Access's words where the token checks speak of MCP servers.
pub fn refusal(error: Option<&TokenError>) -> String {
    let why = match error {
        None => "it is not a bearer JWT",
        Some(TokenError::WrongAudience) => "it is for another Access application (its aud is not ACCESS_AUD)",
        Some(TokenError::WrongIssuer) => "it was issued by another Access team (its iss is not ACCESS_TEAM_DOMAIN)",
        Some(TokenError::UnknownKey) => "no key of the Access team's certs matches its kid",
        Some(e) => e.description(),
    };
    format!(
        "the Cloudflare Access assertion (Cf-Access-Jwt-Assertion) was refused: {why}; sign in through Access again"
    )
}

/// A console GET that writes (Dify's `GET …/refresh`, kept for callers that send a token) is
/// refused to a caller Access let in: the browser sends Access's cookie with a GET another site
/// starts (a link, an image), which could rotate a server code behind the user's back.
pub fn writing_get(caller: &Identity, method: &str, path: &str) -> Result<(), ApiError> {
    if method != "GET" || caller.access_user.is_none() {
        return Ok(());
    }
    let mut e = ApiError::method_not_allowed(method, path, "POST");
    e.message = format!(
        "GET is not allowed on {path} for a caller signed in through Cloudflare Access (another site could \
         make the browser send it): use POST; GET is kept for callers that send an Authorization header"
    );
    Err(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn off_unless_both_are_set() {
        assert_eq!(config(None, None, None), Ok(None));
        assert_eq!(config(Some("  "), Some(""), Some("viewer")), Ok(None));
        assert!(config(Some("team.cloudflareaccess.com"), None, None).unwrap_err().contains("ACCESS_AUD is not"));
        assert!(config(None, Some("abc"), None).unwrap_err().contains("ACCESS_TEAM_DOMAIN is not"));
    }

    #[test]
    fn a_team_domain_names_the_issuer_and_its_keys() {
        let c = config(Some("team.cloudflareaccess.com/"), Some(" aud-tag "), None).unwrap().unwrap();
        assert_eq!(c.settings.issuer, "https://team.cloudflareaccess.com");
        assert_eq!(c.settings.jwks_uri.as_deref(), Some("https://team.cloudflareaccess.com/cdn-cgi/access/certs"));
        assert_eq!(c.settings.audience.as_deref(), Some("aud-tag"));
        assert_eq!(c.audience, "aud-tag");
        assert_eq!(c.role, Role::Admin);
        let local = config(Some("http://127.0.0.1:9000"), Some("a"), Some("viewer")).unwrap().unwrap();
        assert_eq!(local.settings.issuer, "http://127.0.0.1:9000");
        assert_eq!(local.role, Role::Viewer);
        assert!(config(Some("team.example/path"), Some("a"), None).unwrap_err().contains("must be a host"));
        assert!(config(Some("t.example"), Some("a"), Some("owner")).unwrap_err().contains("ACCESS_ROLE"));
    }

    #[test]
    fn refusals_speak_of_access() {
        assert!(refusal(Some(&TokenError::WrongAudience)).contains("another Access application"));
        assert!(refusal(Some(&TokenError::WrongIssuer)).contains("another Access team"));
        assert!(refusal(Some(&TokenError::Expired)).contains("has expired"));
        assert!(refusal(None)
            .starts_with("the Cloudflare Access assertion (Cf-Access-Jwt-Assertion) was refused: it is not"));
    }

    #[test]
    fn a_get_that_writes_is_for_token_callers_only() {
        let access = Identity::access(Role::Admin, "ada@example.com".into());
        let e = writing_get(&access, "GET", "\"/console/api/servers/s1/refresh\"").unwrap_err();
        assert_eq!((e.status, e.allow), (405, Some("POST")));
        assert!(
            e.message.contains("signed in through Cloudflare Access") && e.message.contains("use POST"),
            "{}",
            e.message
        );
        assert!(writing_get(&access, "POST", "p").is_ok());
        assert!(writing_get(&Identity::bootstrap(), "GET", "p").is_ok());
    }

    #[test]
    fn users_are_named_by_email_else_sub() {
        assert_eq!(user_name(&json!({"email": "ada@example.com", "sub": "u1"}), "u1"), "ada@example.com");
        assert_eq!(user_name(&json!({"sub": "svc"}), "svc"), "svc");
        assert_eq!(user_name(&json!({"email": " "}), "svc"), "svc");
    }
}
