//! Backend credentials: a whole-string `$NAME` names a Worker secret or variable; a literal is
//! stored sealed (AES-256-GCM under `SECRETS_KEY`, see `pure::sealed`) and opened at call time
//! (kept opened for a minute in the isolate's memo: a hot app's calls run no AES each).

use std::rc::Rc;

use crate::runtime::Env;
use serde_json::Value;

use crate::pure::backend::credentials::{is_secret_ref, seal_literals, SlotError};
use crate::pure::config;
use crate::pure::error::ApiError;
use crate::pure::random::Unavailable;
use crate::pure::sealed;

/// Why a credential could not be resolved, sealed or opened. Shown as words that complete "the
/// credential …" (or, for `Keys`, a whole sentence about the key): they name a `$NAME` or a
/// sealing problem, never a value.
#[derive(Debug)]
pub enum Error {
    /// SECRETS_KEY or SECRETS_KEY_PREVIOUS does not read (the configuration's words).
    Keys(String),
    Sealed(sealed::Error),
    /// A `$NAME` this deployment does not allow, and why.
    NotAllowed {
        name: String,
        why: String,
    },
    /// A `$NAME` this Worker has not set.
    Unset(String),
    /// A literal credential with no SECRETS_KEY to seal it under.
    NoKey,
    /// No nonce to seal with.
    Random(Unavailable),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Keys(why) => f.write_str(why),
            Error::Sealed(e) => e.fmt(f),
            Error::NotAllowed { name, why } => write!(f, "refers to ${name}, {why}"),
            Error::Unset(name) => write!(
                f,
                "refers to ${name}, which is not set on this Worker: {}",
                crate::pure::backend::advice::how_to_set(name)
            ),
            Error::NoKey => f.write_str(
                "is a literal credential, which Flowgate stores only encrypted: set the SECRETS_KEY secret \
                 (64 hex characters), or use a $NAME reference to a Worker secret",
            ),
            Error::Random(e) => e.fmt(f),
        }
    }
}

impl From<sealed::Error> for Error {
    fn from(e: sealed::Error) -> Error {
        Error::Sealed(e)
    }
}

impl From<Unavailable> for Error {
    fn from(e: Unavailable) -> Error {
        Error::Random(e)
    }
}

/// Why a backend's credentials were not sealed (or resealed): the slot at fault, or `None`
/// when the keys themselves do not read. Shown as "<slot> <why>", or the keys' problem alone.
#[derive(Debug)]
pub struct Unsealable {
    pub field: Option<String>,
    pub error: Error,
}

impl std::fmt::Display for Unsealable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{field} {}", self.error),
            None => self.error.fmt(f),
        }
    }
}

impl From<Error> for Unsealable {
    fn from(error: Error) -> Unsealable {
        Unsealable { field: None, error }
    }
}

impl From<SlotError<Error>> for Unsealable {
    fn from(e: SlotError<Error>) -> Unsealable {
        Unsealable { field: Some(e.path), error: e.error }
    }
}

/// A credential that cannot be stored is the fault of its field (`backend` when the keys do
/// not read).
impl From<Unsealable> for ApiError {
    fn from(e: Unsealable) -> ApiError {
        ApiError::field(e.field.as_deref().unwrap_or("backend"), format!("{}", e.error))
    }
}

/// The sealing keys: the current one first, then the previous one (during a rotation).
pub fn keys(env: &Env) -> Result<Vec<[u8; 32]>, Error> {
    // Read once per isolate: a call that opens a sealed credential asks every time.
    crate::shell::platform::settings(env).sealing_keys.clone().map_err(Error::Keys)
}

/// Which `$NAME` references this Worker allows (`SECRET_REF_PREFIX`, `SECRET_REF_NAMES`; none
/// when neither is set).
pub fn ref_policy(env: &Env) -> config::RefPolicy {
    crate::shell::platform::settings(env).ref_policy.clone()
}

/// The credential's value. `Err` completes "the credential …": it names a missing `$NAME`, a
/// reference that is not allowed (Flowgate's own configuration, or not allowed by
/// `SECRET_REF_PREFIX` / `SECRET_REF_NAMES`) or a sealing problem, never a value.
pub fn resolve(env: &Env, value: &str) -> Result<String, Error> {
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
        return Err(Error::NotAllowed { name: name.to_string(), why });
    }
    crate::shell::platform::named_value(env, name).ok_or_else(|| Error::Unset(name.to_string()))
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
pub fn seal_backend(env: &Env, backend: &mut Value) -> Result<(), Unsealable> {
    let keys = keys(env)?;
    let key = keys.first().copied();
    seal_literals(backend, &mut |plain| {
        let key = key.ok_or(Error::NoKey)?;
        let mut nonce = [0u8; 12];
        crate::runtime::fill_random(&mut nonce)?;
        Ok(sealed::seal(&key, nonce, plain)?)
    })?;
    Ok(())
}

/// Re-seals every sealed credential with the current key (after a rotation).
pub fn reseal_backend(env: &Env, backend: &mut Value) -> Result<bool, Unsealable> {
    let keys = keys(env)?;
    let Some(current) = keys.first().copied() else { return Ok(false) };
    let mut changed = false;
    crate::pure::backend::credentials::map_credentials(backend, &mut |v| {
        if !sealed::is_sealed(v) {
            return Ok(None);
        }
        let plain = sealed::open(&keys, v)?;
        let mut nonce = [0u8; 12];
        crate::runtime::fill_random(&mut nonce)?;
        changed = true;
        Ok(Some(sealed::seal(&current, nonce, &plain)?))
    })?;
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The console reads a sealing failure as a 400 on the slot at fault, in the words the
    /// `Err(String)` of before gave ("<slot> <why>", split at the slot).
    #[test]
    fn an_unsealable_credential_is_its_fields_fault() {
        let slot = Unsealable { field: Some("backend.headers.X-Key".into()), error: Error::NoKey };
        assert!(slot.to_string().starts_with("backend.headers.X-Key is a literal credential, which Flowgate stores"));
        let e = ApiError::from(slot);
        assert_eq!((e.status, e.code, e.errors[0].field.as_str()), (400, "validation_failed", "backend.headers.X-Key"));
        assert!(
            e.errors[0].message.starts_with("is a literal credential")
                && e.message.starts_with("backend.headers.X-Key: is a")
        );
        let keys = Unsealable::from(Error::Keys("the SECRETS_KEY secret must be 64 hex characters".into()));
        assert_eq!(keys.to_string(), "the SECRETS_KEY secret must be 64 hex characters");
        let e = ApiError::from(keys);
        assert_eq!(
            (e.errors[0].field.as_str(), e.errors[0].message.as_str()),
            ("backend", "the SECRETS_KEY secret must be 64 hex characters")
        );
        let opened =
            Unsealable::from(SlotError { path: "backend.api_key".into(), error: Error::from(sealed::Error::Damaged) });
        assert_eq!(opened.to_string(), "backend.api_key the stored credential is damaged");
    }

    #[test]
    fn reference_problems_complete_the_credential() {
        let e = Error::NotAllowed { name: "SECRETS_KEY".into(), why: "which is Flowgate's own".into() };
        assert_eq!(e.to_string(), "refers to $SECRETS_KEY, which is Flowgate's own");
        assert!(Error::Unset("Dify_key".into())
            .to_string()
            .starts_with("refers to $Dify_key, which is not set on this Worker: "));
        assert_eq!(Error::from(Unavailable).to_string(), Unavailable.to_string());
    }
}
