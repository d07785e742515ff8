//! Which member names `strip` removes: key names with an optional trailing `*` for a prefix
//! match, compared without regard to case. Every member name of every answer is checked, so a
//! pattern set turns most names away by their first byte and length before comparing.

use crate::wire::json::fold;

/// Secrets and their expiries that `strip` removes by default: S3, GCS, ADLS (SAS tokens,
/// shared keys, connection strings), OSS and pyiceberg's `client.*` keys, JDBC, Hugging Face,
/// OAuth client credentials, bearer tokens, an `Authorization` header a client would send, and
/// RFC 8693 token types.
pub const DEFAULT_STRIP_KEYS: &[&str] = &[
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.session-token-expires-at-ms",
    "gcs.oauth2.token",
    "gcs.oauth2.token-expires-at",
    "gcs.oauth2.refresh-token",
    "adls.sas-token.*",
    "adls.sas-token-expires-at-ms.*",
    "adls.connection-string.*",
    "adls.auth.shared-key.account.key",
    "client.access-key-id",
    "client.access-key-secret",
    "client.secret-access-key",
    "client.session-token",
    "client.security-token",
    "client.security-token-expires-at-ms",
    "jdbc.password",
    "hf.token",
    "credential",
    "token",
    "header.authorization",
    "urn:ietf:params:oauth:token-type:*",
];

/// Key names with an optional trailing `*` for a prefix match, compared without regard to
/// case (a client that reads `S3.Secret-Access-Key` must not get it either); a name outside
/// ASCII is compared folded too, the way Go matches names (`ſ` is `s`, the Kelvin sign `k`).
#[derive(Debug, Clone)]
pub struct KeyPatterns {
    patterns: Vec<String>,
    /// The first bytes (either case) a pattern can match, the lengths of exact patterns (bit
    /// `n` for length `n` below 64, bit 63 for longer ones) and the shortest prefix pattern:
    /// every member name of a body is checked, and most are turned away by these.
    first: [bool; 256],
    exact_lengths: u64,
    shortest_prefix: usize,
}

impl PartialEq for KeyPatterns {
    fn eq(&self, other: &Self) -> bool {
        self.patterns == other.patterns
    }
}

impl Eq for KeyPatterns {}

impl std::hash::Hash for KeyPatterns {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.patterns.hash(state);
    }
}

/// A length's bit in `KeyPatterns::exact_lengths`.
fn length_bit(length: usize) -> u64 {
    1 << length.min(63)
}

/// Members that hold an answer's shape: a strip key may not name them (removing them would
/// break every LoadTableResult and LoadCredentialsResponse); what is inside them is walked.
pub const STRUCTURAL_NAMES: &[&str] = &["config", "storage-credentials", "prefix"];

impl KeyPatterns {
    pub fn new(patterns: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let patterns: Vec<String> = patterns
            .into_iter()
            .map(|p| p.into().to_ascii_lowercase())
            .collect();
        let mut first = [false; 256];
        let mut exact_lengths = 0;
        let mut shortest_prefix = usize::MAX;
        for pattern in &patterns {
            match pattern.strip_suffix('*') {
                Some(prefix) => shortest_prefix = shortest_prefix.min(prefix.len()),
                None => exact_lengths |= length_bit(pattern.len()),
            }
            match pattern.as_bytes().first() {
                // `*` alone (or an empty name) can match any first byte.
                Some(b'*') | None => first = [true; 256],
                Some(&byte) => {
                    first[usize::from(byte)] = true;
                    first[usize::from(byte.to_ascii_uppercase())] = true;
                }
            }
        }
        KeyPatterns {
            patterns,
            first,
            exact_lengths,
            shortest_prefix,
        }
    }

    pub fn matches(&self, key: &str) -> bool {
        if !key.is_ascii() && self.matches_ascii(&fold(key)) {
            return true;
        }
        self.matches_ascii(key)
    }

    fn matches_ascii(&self, key: &str) -> bool {
        if !self.first[usize::from(key.as_bytes().first().copied().unwrap_or(0))]
            || (self.exact_lengths & length_bit(key.len()) == 0 && key.len() < self.shortest_prefix)
        {
            return false;
        }
        self.patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => {
                key.len() >= prefix.len()
                    && key.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
            }
            None => key.eq_ignore_ascii_case(p),
        })
    }

    /// The patterns that would remove a member holding an answer's shape.
    pub fn structural(&self) -> Vec<&str> {
        self.patterns
            .iter()
            .filter(|p| {
                let one = KeyPatterns::new([p.as_str()]);
                STRUCTURAL_NAMES.iter().any(|name| one.matches(name))
            })
            .map(String::as_str)
            .collect()
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

impl Default for KeyPatterns {
    fn default() -> Self {
        KeyPatterns::new(DEFAULT_STRIP_KEYS.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_exact_keys_and_prefixes_in_any_case() {
        let p = KeyPatterns::default();
        assert!(p.matches("s3.secret-access-key"));
        assert!(p.matches("S3.Secret-Access-Key"));
        assert!(p.matches("adls.sas-token.account1"));
        assert!(p.matches("URN:ietf:params:oauth:token-type:jwt"));
        assert!(!p.matches("s3.endpoint"));
        assert!(!p.matches("client.region"));
        assert!(!p.matches("adls.sas"));
    }

    #[test]
    fn names_outside_ascii_are_compared_folded() {
        let p = KeyPatterns::default();
        assert!(
            p.matches("\u{17f}3.secret-access-key"),
            "the long s is an s"
        );
        assert!(p.matches("to\u{212a}en"), "the Kelvin sign is a k");
        assert!(!p.matches("t\u{f6}ken"));
    }

    #[test]
    fn patterns_that_would_remove_an_answers_shape_are_named() {
        assert!(KeyPatterns::default().structural().is_empty());
        let p = KeyPatterns::new(["token", "conf*", "PREFIX", "*"]);
        assert_eq!(p.structural(), ["conf*", "prefix", "*"]);
    }
}
