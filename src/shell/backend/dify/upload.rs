//! The files of a Dify call, before the call: each URL judged by the guard (Dify fetches it, so
//! a URL Flowgate would not fetch itself never reaches Dify), each piece of data decoded within
//! its size cap and uploaded to the app (`POST /files/upload`, multipart, as the call's end
//! user), then every file's Dify value placed into the request. A refusal is the call's tool
//! error, and nothing is sent after it.

use std::time::Duration;

use crate::pure::backend::dify::files::{self, decode_bounded, too_large, FileError, FileProblem, Source};
use crate::pure::definition::ServerDefinition;
use crate::pure::mcp::server::{self, CallPlan, CallRequest, Step};
use crate::pure::outcome::Outcome;
use crate::runtime::{Env, Headers, Method};
use crate::shell::call::stream::{BadCredentials, Target};
use crate::shell::outbound::{self, CrossOrigin, SendError};
use crate::shell::VERSION;

/// An upload's answer is a small JSON object.
const ANSWER_CAP: usize = 64 * 1024;

/// `step` with the files of its call placed, or the reply refusing them. Steps without files
/// pass as they are.
pub async fn with_files(step: Step, def: &ServerDefinition, env: &Env) -> Step {
    let refused = |plan: &CallPlan, outcome: Outcome| {
        let body = server::finish_call(plan, outcome, VERSION);
        Step::Reply { status: server::call_status(plan.version, &body), body: Some(body) }
    };
    match step {
        Step::Call(mut plan) if !plan.files.is_empty() => match place_files(&mut plan, def, env).await {
            Ok(()) => Step::Call(plan),
            Err(outcome) => refused(&plan, outcome),
        },
        Step::CreateTask { mut plan, ttl_ms } if !plan.files.is_empty() => {
            match place_files(&mut plan, def, env).await {
                Ok(()) => Step::CreateTask { plan, ttl_ms },
                Err(outcome) => refused(&plan, outcome),
            }
        }
        other => other,
    }
}

/// Judges or uploads every file of `plan`, in order, and places their values into its request.
async fn place_files(plan: &mut CallPlan, def: &ServerDefinition, env: &Env) -> Result<(), Outcome> {
    let pending = std::mem::take(&mut plan.files);
    let app = def
        .apps
        .get(plan.app_index)
        .and_then(|a| a.backend.as_dify())
        .ok_or_else(|| Outcome::Failed("the app behind this tool was removed; list the tools again".into()))?;
    let target = crate::shell::call::target_of(def, plan.app_index, env)?;
    let allow = outbound::private_allow();
    let max_file_bytes = crate::shell::platform::settings(env).max_file_bytes;
    let system_parameters = app.files.system_parameters.as_ref();
    // URLs first: a refused one stops the call before any upload is made.
    let mut urls = Vec::with_capacity(pending.len());
    for f in &pending {
        urls.push(match &f.source {
            Source::Url(u) => Some(files::judge_url(&f.at, u, &allow)?),
            _ => None,
        });
    }
    let mut placed = Vec::with_capacity(pending.len());
    for (f, url) in pending.into_iter().zip(urls) {
        let value = match (url, f.source) {
            (Some(url), _) => files::remote_value(f.file_type, &url),
            (None, source) => {
                let cap = files::size_cap(f.file_type, system_parameters, max_file_bytes);
                let bytes = match source {
                    Source::Base64(text) => decode_bounded(&f.at, &text, cap)?,
                    Source::Text(text) if text.len() > cap => return Err(too_large(&f.at, text.len(), cap).into()),
                    Source::Text(text) => text.into_bytes(),
                    Source::Url(_) => Vec::new(),
                };
                let id = upload(&target, &plan.user, &f.at, &f.name, &f.mime_type, bytes).await?;
                files::local_value(f.file_type, &id)
            }
        };
        placed.push((f.slot, value));
    }
    if let CallRequest::Dify { body, .. } = &mut plan.request {
        files::place(body, placed);
    }
    Ok(())
}

/// `POST {base_url}/files/upload`: the file and the end user, multipart. The upload's id.
async fn upload(
    target: &Target,
    user: &str,
    at: &str,
    name: &str,
    mime: &str,
    content: Vec<u8>,
) -> Result<String, Outcome> {
    let mut nonce = [0u8; 16];
    crate::runtime::fill_random(&mut nonce)?;
    let boundary = format!("flowgate-{}", crate::pure::ids::hex(&nonce));
    let body = files::multipart(&boundary, name, mime, user, &content);
    drop(content);
    let mut headers = Headers::new();
    headers.set("content-type", &format!("multipart/form-data; boundary={boundary}"));
    headers.set("accept", "application/json");
    if !target.api_key.is_empty() {
        headers
            .try_set("authorization", &format!("Bearer {}", target.api_key))
            .map_err(|_| BadCredentials(target.app_name.clone()))?;
    }
    let url = format!("{}/files/upload", target.base_url);
    let failed = |why: String| Outcome::from(FileError { at: at.to_string(), problem: FileProblem::NotUploaded(why) });
    let timeout = target.total.max(Duration::from_secs(1));
    let mut resp =
        match outbound::send_bytes(Method::Post, &url, headers, Some(body), timeout, CrossOrigin::Refused).await {
            Ok(r) => r,
            Err(SendError::TimedOut) => {
                return Err(failed(format!("the Dify app did not answer within {} s", timeout.as_secs())))
            }
            Err(SendError::Unreachable(e)) => return Err(failed(format!("the Dify app could not be reached: {e}"))),
            Err(SendError::TooLarge(_)) => return Err(failed("the Dify app's answer is too large".into())),
        };
    let status = resp.status_code();
    let text = match outbound::text(&mut resp, timeout, ANSWER_CAP).await {
        Ok(t) => t,
        Err(_) => return Err(failed(format!("the Dify app's answer (HTTP {status}) could not be read"))),
    };
    Ok(files::uploaded_id(at, status, &text)?)
}
