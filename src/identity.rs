//! Who a cached response was made for. A scope is a keyed BLAKE3 hash of the caller's
//! credentials; the key is made at start-up and never leaves the process, so raw tokens are
//! neither stored nor recoverable from what is stored.

use http::header::{HeaderMap, HeaderName, AUTHORIZATION};

/// The caller a cache entry belongs to. Two callers share a scope only when they present the
/// same credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scope([u8; 16]);

impl Scope {
    /// The one scope of entries every caller may be served from (identity `shared` and
    /// `revalidate`); no hash of credentials can equal it except by a 2^-128 chance.
    pub const SHARED: Scope = Scope([0; 16]);
}

pub struct IdentityHasher {
    key: [u8; 32],
    /// Headers besides `Authorization` that identify a caller.
    extra: Vec<HeaderName>,
}

impl IdentityHasher {
    /// A hasher with a fresh random key.
    pub fn random(extra: Vec<HeaderName>) -> Result<Self, getrandom::Error> {
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key)?;
        Ok(IdentityHasher { key, extra })
    }

    /// A hasher with a constant key, for tests that compare keys made at different times.
    #[cfg(test)]
    pub(crate) fn fixed() -> Self {
        IdentityHasher {
            key: [7; 32],
            extra: Vec::new(),
        }
    }

    /// The scope of a request: its `Authorization` header and the configured extra headers,
    /// absent ones being part of the identity too.
    pub fn scope(&self, headers: &HeaderMap) -> Scope {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        for name in std::iter::once(&AUTHORIZATION).chain(&self.extra) {
            hasher.update(&[0xff]);
            for value in headers.get_all(name) {
                // Length-prefixed so that no two header lists hash the same bytes.
                hasher.update(&(value.len() as u64).to_le_bytes());
                hasher.update(value.as_bytes());
            }
        }
        let mut scope = [0u8; 16];
        scope.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
        Scope(scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with_auth(value: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = value {
            h.insert(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn different_tokens_get_different_scopes() {
        let hasher = IdentityHasher::random(Vec::new()).unwrap();
        let a = hasher.scope(&with_auth(Some("Bearer a")));
        let b = hasher.scope(&with_auth(Some("Bearer b")));
        let none = hasher.scope(&with_auth(None));
        let empty = hasher.scope(&with_auth(Some("")));
        assert_ne!(a, b);
        assert_ne!(a, none);
        assert_ne!(none, empty);
        assert_eq!(a, hasher.scope(&with_auth(Some("Bearer a"))));
    }

    #[test]
    fn configured_extra_headers_are_part_of_the_identity() {
        let hasher = IdentityHasher::random(vec![HeaderName::from_static("x-api-key")]).unwrap();
        let mut a = with_auth(Some("Bearer t"));
        a.insert("x-api-key", HeaderValue::from_static("alice"));
        let mut b = with_auth(Some("Bearer t"));
        b.insert("x-api-key", HeaderValue::from_static("bob"));
        assert_ne!(hasher.scope(&a), hasher.scope(&b));
        assert_ne!(hasher.scope(&a), hasher.scope(&with_auth(Some("Bearer t"))));
    }

    #[test]
    fn scopes_depend_on_the_process_key() {
        let one = IdentityHasher::random(Vec::new()).unwrap();
        let two = IdentityHasher::random(Vec::new()).unwrap();
        let h = with_auth(Some("Bearer a"));
        assert_ne!(one.scope(&h), two.scope(&h));
    }
}
