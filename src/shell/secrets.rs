//! Backend credentials: a whole-string `$NAME` names a Worker secret or variable.

use worker::Env;

use crate::core::app::is_secret_ref;

/// The credential's value; `Err(NAME)` when it references something this Worker lacks.
pub fn resolve(env: &Env, value: &str) -> Result<String, String> {
    if !is_secret_ref(value) {
        return Ok(value.to_string());
    }
    let name = &value[1..];
    env.secret(name)
        .map(|s| s.to_string())
        .or_else(|_| env.var(name).map(|v| v.to_string()))
        .map_err(|_| name.to_string())
}
