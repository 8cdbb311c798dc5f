//! `POST /apps/{id}/test`: "Test connection" for an app. Sends the probes its kind allows with
//! its stored settings (a Dify app's `GET /info` and `GET /parameters`, an HTTP tool's endpoint
//! by `GET`, an upstream's `initialize` and `tools/list`) and says in words what is wrong and how
//! to fix it (`pure::connection_test`). Nothing is called that would run the app.

use std::time::Duration;

use serde_json::Value;

use crate::pure::backend::config::Backend;
use crate::pure::backend::mcp::variant::Variant;
use crate::pure::connection_test::{self as diagnose, Check, Level, Probe};
use crate::pure::definition::AppDefinition;
use crate::pure::error::ApiError;
use crate::runtime::{Headers, Method};

use crate::shell::outbound::{self, SendError};

use super::{Console, Result};

/// Each probe's deadline: well under a console request's patience.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// A probe's answer is read up to this much (Dify's /info and /parameters are small).
const PROBE_BODY_CAP: usize = 256 * 1024;

impl Console<'_> {
    pub(super) async fn test_app(&self, id: &str) -> Result<Value> {
        let row = self.app_row(id).await?;
        let app = row
            .to_definition()
            .map_err(|why| ApiError::bad_request(format!("app '{id}' cannot be used: {why}; save it again")))?;
        let checks = match &app.backend {
            Backend::Dify(c) => self.test_dify(&app, &c.base_url, &c.api_key, c.app_mode).await,
            Backend::HttpTool(c) => self.test_http_tool(&c.api_endpoint, c.api_key.as_deref()).await,
            Backend::Mcp(_) => test_upstream(&app, self.env).await,
        };
        Ok(diagnose::report(&checks))
    }

    async fn test_dify(
        &self,
        app: &AppDefinition,
        base_url: &str,
        api_key: &str,
        mode: crate::pure::backend::dify::mode::DifyMode,
    ) -> Vec<Check> {
        let key = match crate::shell::secrets::resolve(self.env, api_key) {
            Ok(k) => k,
            Err(why) => return vec![diagnose::credential_problem("backend.api_key", &format!("{why}"))],
        };
        let base = base_url.trim_end_matches('/');
        let info = diagnose::dify_info(base, &probe(&format!("{base}/info"), Some(&key)).await, mode);
        // Past an unreachable host or a refused key, the next probe would only say it again.
        if info.level == Level::Error {
            return vec![info];
        }
        let stored: Vec<String> = app.form.iter().map(|f| f.variable.clone()).collect();
        let parameters =
            diagnose::dify_parameters(base, &probe(&format!("{base}/parameters"), Some(&key)).await, &stored);
        vec![info, parameters]
    }

    async fn test_http_tool(&self, endpoint: &str, api_key: Option<&str>) -> Vec<Check> {
        let key = match api_key.map(|k| crate::shell::secrets::resolve(self.env, k)).transpose() {
            Ok(k) => k,
            Err(why) => return vec![diagnose::credential_problem("backend.api_key", &format!("{why}"))],
        };
        vec![diagnose::http_tool_endpoint(endpoint, &probe(endpoint, key.as_deref()).await)]
    }
}

/// An upstream's `initialize` and `tools/list` on a new session (the cached tool list is
/// refreshed on the way, as the console's refresh does).
async fn test_upstream(app: &AppDefinition, env: &crate::runtime::Env) -> Vec<Check> {
    let listed = crate::shell::backend::mcp::call::tools_of(app, env, true, Variant::none()).await;
    let names = listed.map(|tools| tools.iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect());
    vec![diagnose::mcp_initialize(&names)]
}

/// A `GET` of `url` (with a bearer key when given): what came back.
async fn probe(url: &str, bearer: Option<&str>) -> Probe {
    let mut headers = Headers::new();
    headers.set("accept", "application/json");
    if let Some(key) = bearer {
        if headers.try_set("authorization", &format!("Bearer {key}")).is_err() {
            return Probe::Unreachable("the key holds characters an HTTP header cannot carry".into());
        }
    }
    match outbound::send(Method::Get, url, headers, None, PROBE_TIMEOUT).await {
        Ok(mut resp) => {
            let status = resp.status_code();
            let body = outbound::text(&mut resp, PROBE_TIMEOUT, PROBE_BODY_CAP).await.unwrap_or_default();
            Probe::Answered { status, body }
        }
        Err(SendError::Unreachable(e)) => Probe::Unreachable(e.to_string()),
        Err(SendError::TimedOut | SendError::TooLarge(_)) => Probe::TimedOut(PROBE_TIMEOUT.as_secs()),
    }
}
