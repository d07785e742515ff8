//! Who a cached response was made for. A scope is a keyed BLAKE3 hash of the caller's
//! credentials; the key is made at start-up and never leaves the process, so raw tokens are
//! neither stored nor recoverable from what is stored.

use http::header::HeaderName;

use crate::wire::headers::HeaderLookup;

/// Headers that identify a caller whatever is configured: a catalog may authenticate with any
/// of them (rustberg takes `X-API-Key` as well as a bearer token).
pub const DEFAULT_IDENTITY_HEADERS: &[&str] = &["authorization", "cookie", "x-api-key"];

/// The caller a cache entry belongs to. Two callers share a scope only when they present the
/// same credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scope([u8; 16]);

impl Scope {
    /// The one scope of entries every caller may be served from (identity `shared` and
    /// `revalidate`); no hash of credentials can equal it except by a 2^-128 chance.
    pub const SHARED: Scope = Scope([0; 16]);

    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

pub struct IdentityHasher {
    key: [u8; 32],
    /// The headers that identify a caller: the defaults and the configured `auth_headers`.
    headers: Vec<HeaderName>,
}

impl IdentityHasher {
    /// A hasher with a fresh random key.
    pub fn random(headers: Vec<HeaderName>) -> Result<Self, getrandom::Error> {
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key)?;
        Ok(IdentityHasher::with_key(key, headers))
    }

    /// A hasher with a given key (replicas that must agree on scopes share one).
    pub fn with_key(key: [u8; 32], headers: Vec<HeaderName>) -> Self {
        IdentityHasher { key, headers }
    }

    /// A hasher with a constant key, for tests that compare keys made at different times.
    #[cfg(test)]
    pub(crate) fn fixed() -> Self {
        IdentityHasher::with_key([7; 32], identity_headers(&[]))
    }

    /// Whether `name` is one of the headers that make up a scope.
    pub fn identifies(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|h| h.as_str().eq_ignore_ascii_case(name))
    }

    /// The scope of a request: its identifying headers, absent ones being part of the
    /// identity too.
    pub fn scope(&self, headers: &impl HeaderLookup) -> Scope {
        RECENT.with(|recent| {
            let mut recent = recent.borrow_mut();
            let Recent { input, seen, next } = &mut *recent;
            input.clear();
            input.extend_from_slice(&self.key);
            for name in &self.headers {
                input.push(0xff);
                for value in headers.values(name) {
                    // Length-prefixed so that no two header lists hash the same bytes.
                    let length = u64::try_from(value.len()).unwrap_or(u64::MAX);
                    input.extend_from_slice(&length.to_le_bytes());
                    input.extend_from_slice(value.as_bytes());
                }
            }
            // The same bytes under the same key hash the same: a keep-alive connection sends
            // one token again and again, and the hash costs more than the rest of a hit.
            if let Some((_, scope)) = seen.iter().find(|(bytes, _)| bytes == input) {
                return *scope;
            }
            let hash = blake3::keyed_hash(&self.key, &input[self.key.len()..]);
            let mut scope = [0u8; 16];
            scope.copy_from_slice(&hash.as_bytes()[..16]);
            let scope = Scope(scope);
            if input.len() <= MAX_REMEMBERED_BYTES {
                let slot = (input.clone(), scope);
                if seen.len() < REMEMBERED {
                    seen.push(slot);
                } else {
                    seen[*next] = slot;
                    *next = (*next + 1) % REMEMBERED;
                }
            }
            scope
        })
    }
}

/// How many recent credential lists each worker thread remembers the scope of, and the
/// longest it remembers (a few tokens per thread are the common case; a large cookie is not).
const REMEMBERED: usize = 4;
const MAX_REMEMBERED_BYTES: usize = 4096;

/// A worker thread's recent scopes, each under the key and header bytes it was made from.
#[derive(Default)]
struct Recent {
    /// This request's key and header bytes (reused, so that no request allocates for it).
    input: Vec<u8>,
    seen: Vec<(Vec<u8>, Scope)>,
    next: usize,
}

thread_local! {
    static RECENT: std::cell::RefCell<Recent> = std::cell::RefCell::new(Recent::default());
}

/// The default identifying headers plus the configured ones, without repeats.
pub fn identity_headers(configured: &[HeaderName]) -> Vec<HeaderName> {
    let mut headers: Vec<HeaderName> = DEFAULT_IDENTITY_HEADERS
        .iter()
        .map(|h| HeaderName::from_static(h))
        .collect();
    for header in configured {
        if !headers.contains(header) {
            headers.push(header.clone());
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    fn with_auth(value: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = value {
            h.insert(
                http::header::AUTHORIZATION,
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn different_tokens_get_different_scopes() {
        let hasher = IdentityHasher::random(identity_headers(&[])).unwrap();
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
        let hasher =
            IdentityHasher::random(identity_headers(&[HeaderName::from_static("x-tenant")]))
                .unwrap();
        let mut a = with_auth(Some("Bearer t"));
        a.insert("x-tenant", HeaderValue::from_static("alice"));
        let mut b = with_auth(Some("Bearer t"));
        b.insert("x-tenant", HeaderValue::from_static("bob"));
        assert_ne!(hasher.scope(&a), hasher.scope(&b));
        assert_ne!(hasher.scope(&a), hasher.scope(&with_auth(Some("Bearer t"))));
    }

    #[test]
    fn cookies_and_api_keys_identify_callers_by_default() {
        let hasher = IdentityHasher::random(identity_headers(&[])).unwrap();
        for name in ["cookie", "x-api-key"] {
            let mut a = HeaderMap::new();
            a.insert(name, HeaderValue::from_static("alice"));
            let mut b = HeaderMap::new();
            b.insert(name, HeaderValue::from_static("bob"));
            assert_ne!(hasher.scope(&a), hasher.scope(&b), "{name}");
        }
    }

    #[test]
    fn scopes_depend_on_the_process_key() {
        let one = IdentityHasher::random(identity_headers(&[])).unwrap();
        let two = IdentityHasher::random(identity_headers(&[])).unwrap();
        let h = with_auth(Some("Bearer a"));
        assert_ne!(one.scope(&h), two.scope(&h));
    }

    #[test]
    fn a_remembered_scope_is_the_scope_the_hash_gives() {
        let one = IdentityHasher::with_key([1; 32], identity_headers(&[]));
        let other = IdentityHasher::with_key([2; 32], identity_headers(&[]));
        // More tokens than a thread remembers, asked in turn, each twice, under two keys.
        let tokens: Vec<String> = (0..REMEMBERED + 3)
            .map(|n| format!("Bearer t{n}"))
            .collect();
        let fresh = |hasher: &IdentityHasher, token: &str| {
            let hash = blake3::keyed_hash(
                &hasher.key,
                &[
                    &[0xffu8][..],
                    &(token.len() as u64).to_le_bytes(),
                    token.as_bytes(),
                    &[0xff, 0xff],
                ]
                .concat(),
            );
            Scope(hash.as_bytes()[..16].try_into().unwrap())
        };
        for _ in 0..2 {
            for token in &tokens {
                let headers = with_auth(Some(token));
                assert_eq!(one.scope(&headers), fresh(&one, token));
                assert_eq!(other.scope(&headers), fresh(&other, token));
                assert_ne!(one.scope(&headers), other.scope(&headers));
            }
        }
    }
}
