//! Backend credentials: a whole-string `$NAME` names a Worker secret or variable; a literal is
//! stored sealed (AES-256-GCM under `SECRETS_KEY`, see `pure::sealed`) and opened at call time
//! (kept opened for a minute in the isolate's memo: a hot app's calls run no AES each).

use std::rc::Rc;

use crate::runtime::Env;
use serde_json::Value;

use crate::pure::backend::credentials::{is_secret_ref, seal_literals};
use crate::pure::config;
use crate::pure::sealed;

/// The sealing keys: the current one first, then the previous one (during a rotation).
pub fn keys(env: &Env) -> Result<Vec<[u8; 32]>, String> {
    // Read once per isolate: a call that opens a sealed credential asks every time.
    crate::shell::platform::settings(env).sealing_keys.clone()
}

/// Which `$NAME` references this Worker allows (`SECRET_REF_PREFIX`, `SECRET_REF_NAMES`; none
/// when neither is set).
pub fn ref_policy(env: &Env) -> config::RefPolicy {
    crate::shell::platform::settings(env).ref_policy.clone()
}

/// The credential's value. `Err` completes "the credential …": it names a missing `$NAME`, a
/// reference that is not allowed (Flowgate's own configuration, or not allowed by
/// `SECRET_REF_PREFIX` / `SECRET_REF_NAMES`) or a sealing problem, never a value.
pub fn resolve(env: &Env, value: &str) -> Result<String, String> {
    if sealed::is_sealed(value) {
        let now = crate::shell::platform::now_ms();
        if let Some(plain) = crate::shell::memo::opened(value, now) {
            return Ok(plain.to_string());
        }
        let plain = sealed::open(&keys(env)?, value)?;
        crate::shell::memo::remember_opened(value, Rc::from(plain.as_str()), now);
        return Ok(plain);
    }
    if !is_secret_ref(value) {
        return Ok(value.to_string());
    }
    let name = &value[1..];
    // Checked again at call time: an app stored before a rule existed (or written to D1 by
    // other means) must not reach a secret the deployment did not allow.
    if let Some(why) = ref_policy(env).problem(name) {
        return Err(format!("refers to ${name}, {why}"));
    }
    crate::shell::platform::named_value(env, name).ok_or_else(|| {
        format!(
            "refers to ${name}, which is not set on this Worker: {}",
            crate::pure::backend::advice::how_to_set(name)
        )
    })
}

/// Warnings for the `$NAME`s a backend's credentials refer to that this Worker has not set: the
/// app saves (the secret may come later), and says how to set each, since calls fail until then.
pub fn unset_references(env: &Env, backend: &Value) -> Vec<String> {
    crate::pure::backend::advice::references(backend)
        .into_iter()
        .filter(|(_, name)| crate::shell::platform::named_value(env, name).is_none())
        .map(|(field, name)| crate::pure::backend::advice::unset_secret(&field, &name))
        .collect()
}

/// Seals every literal credential of a backend before it is stored. Without `SECRETS_KEY` a
/// literal cannot be stored: `Err` says so (use a `$NAME` reference or set the key).
pub fn seal_backend(env: &Env, backend: &mut Value) -> Result<(), String> {
    let keys = keys(env)?;
    let key = keys.first().copied();
    seal_literals(backend, &mut |plain| {
        let key = key.ok_or_else(|| {
            "is a literal credential, which Flowgate stores only encrypted: set the SECRETS_KEY secret \
             (64 hex characters), or use a $NAME reference to a Worker secret"
                .to_string()
        })?;
        let mut nonce = [0u8; 12];
        crate::runtime::fill_random(&mut nonce).map_err(|e| e.to_string())?;
        sealed::seal(&key, nonce, plain)
    })
}

/// Re-seals every sealed credential with the current key (after a rotation).
pub fn reseal_backend(env: &Env, backend: &mut Value) -> Result<bool, String> {
    let keys = keys(env)?;
    let Some(current) = keys.first().copied() else { return Ok(false) };
    let mut changed = false;
    crate::pure::backend::credentials::map_credentials(backend, &mut |v| {
        if !sealed::is_sealed(v) {
            return Ok(None);
        }
        let plain = sealed::open(&keys, v)?;
        let mut nonce = [0u8; 12];
        crate::runtime::fill_random(&mut nonce).map_err(|e| e.to_string())?;
        changed = true;
        sealed::seal(&current, nonce, &plain).map(Some)
    })?;
    Ok(changed)
}
