//! Which member names `strip` removes: key names with an optional trailing `*` for a prefix
//! match or a leading `*` for a suffix match, compared without regard to case. Every member
//! name of every answer is checked, so a pattern set turns most names away by their first or
//! last byte and length before comparing.

use crate::wire::json::fold;

/// Secrets and their expiries that `strip` removes by default: S3, GCS, ADLS (SAS tokens,
/// shared keys, connection strings, in Java's and pyiceberg's spellings), OSS and pyiceberg's
/// `client.*` keys, the REST client's own SigV4 keys, S3 SSE-C keys, JDBC, Hugging Face, OAuth
/// client credentials, bearer tokens, an `Authorization` header a client would send, RFC 8693
/// token types, and any dotted name ending in a secret's word (`*.token`, `*.password`, …).
/// The OAuth token answer's own `access_token` is not among them: it is what the caller asked
/// for with its own secret.
pub const DEFAULT_STRIP_KEYS: &[&str] = &[
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.session-token-expires-at-ms",
    "s3.sse.key",
    "gcs.oauth2.token",
    "gcs.oauth2.token-expires-at",
    "gcs.oauth2.refresh-token",
    "adls.sas-token*",
    "adls.connection-string*",
    "adls.auth.shared-key.account.key",
    "adls.account-key",
    "adls.client-secret",
    "client.access-key-id",
    "client.access-key-secret",
    "client.secret-access-key",
    "client.session-token",
    "client.security-token",
    "client.security-token-expires-at-ms",
    "rest.access-key-id",
    "rest.secret-access-key",
    "rest.session-token",
    "jdbc.password",
    "hf.token",
    "credential",
    "token",
    "password",
    "secret",
    "aws_secret_access_key",
    "aws_session_token",
    "header.authorization",
    "urn:ietf:params:oauth:token-type:*",
    "*.token",
    "*.credential",
    "*.password",
    "*.secret",
    "*.secret-access-key",
    "*.session-token",
    "*.account-key",
    "*.client-secret",
];

/// Key names with an optional trailing `*` for a prefix match or a leading `*` for a suffix
/// match, compared without regard to case (a client that reads `S3.Secret-Access-Key` must
/// not get it either); a name outside ASCII is compared folded too, the way Go matches names
/// (`ſ` is `s`, the Kelvin sign `k`).
#[derive(Debug, Clone)]
pub struct KeyPatterns {
    patterns: Vec<String>,
    /// Exact and prefix patterns: the first bytes (either case) they can match, the lengths
    /// of exact ones (bit `n` for length `n` below 64, bit 63 for longer ones) and the
    /// shortest prefix: every member name of a body is checked, and most are turned away by
    /// these.
    heads: Vec<String>,
    first: [bool; 256],
    exact_lengths: u64,
    shortest_prefix: usize,
    /// Suffix patterns (without their `*`) and, for each last byte (either case), which of
    /// them end in it (bit `i` for suffix `i`; bit 31 stands for every suffix from 31 on).
    suffixes: Vec<String>,
    ending_in: [u32; 256],
}

/// A suffix's bit in `KeyPatterns::ending_in`.
fn suffix_bit(index: usize) -> u32 {
    1 << index.min(31)
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

/// Answer headers that frame or label a body: a strip key may not name them. Without
/// `content-encoding` a gzip body goes out unlabelled, without `content-type` no load is ever
/// stored, and the HTTP layer writes the others whatever a pattern says.
pub const FRAMING_NAMES: &[&str] = &[
    "content-encoding",
    "content-type",
    "content-length",
    "transfer-encoding",
    "date",
    "connection",
];

impl KeyPatterns {
    pub fn new(patterns: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let patterns: Vec<String> = patterns
            .into_iter()
            .map(|p| p.into().to_ascii_lowercase())
            .collect();
        let mut first = [false; 256];
        let mut exact_lengths = 0;
        let mut shortest_prefix = usize::MAX;
        let mut heads = Vec::new();
        let mut suffixes = Vec::new();
        let mut ending_in = [0u32; 256];
        let either_case = |table: &mut [bool; 256], byte: u8| {
            table[usize::from(byte.to_ascii_lowercase())] = true;
            table[usize::from(byte.to_ascii_uppercase())] = true;
        };
        for pattern in &patterns {
            if let Some(suffix) = pattern
                .strip_prefix('*')
                .filter(|_| !pattern.ends_with('*'))
            {
                let bit = suffix_bit(suffixes.len());
                match suffix.as_bytes().last() {
                    Some(&byte) => {
                        ending_in[usize::from(byte.to_ascii_lowercase())] |= bit;
                        ending_in[usize::from(byte.to_ascii_uppercase())] |= bit;
                    }
                    None => ending_in.iter_mut().for_each(|mask| *mask |= bit),
                }
                suffixes.push(suffix.to_owned());
                continue;
            }
            heads.push(pattern.clone());
            match pattern.strip_suffix('*') {
                Some(prefix) => shortest_prefix = shortest_prefix.min(prefix.len()),
                None => exact_lengths |= length_bit(pattern.len()),
            }
            match pattern.as_bytes().first() {
                // `*` alone (or an empty name) can match any first byte.
                Some(b'*') | None => first = [true; 256],
                Some(&byte) => either_case(&mut first, byte),
            }
        }
        KeyPatterns {
            patterns,
            heads,
            first,
            exact_lengths,
            shortest_prefix,
            suffixes,
            ending_in,
        }
    }

    pub fn matches(&self, key: &str) -> bool {
        if !key.is_ascii() && self.matches_ascii(&fold(key)) {
            return true;
        }
        self.matches_ascii(key)
    }

    fn matches_ascii(&self, key: &str) -> bool {
        let bytes = key.as_bytes();
        let mut ending = self.ending_in[usize::from(bytes.last().copied().unwrap_or(0))];
        while ending != 0 {
            let index = ending.trailing_zeros() as usize;
            ending &= ending - 1;
            // Bit 31 stands for every suffix from 31 on.
            let candidates = if index == 31 {
                &self.suffixes[31..]
            } else {
                &self.suffixes[index..=index]
            };
            if candidates.iter().any(|suffix| {
                bytes.len() >= suffix.len()
                    && bytes[bytes.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
            }) {
                return true;
            }
        }
        if !self.first[usize::from(bytes.first().copied().unwrap_or(0))]
            || (self.exact_lengths & length_bit(key.len()) == 0 && key.len() < self.shortest_prefix)
        {
            return false;
        }
        self.heads.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => {
                key.len() >= prefix.len()
                    && bytes[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
            }
            None => key.eq_ignore_ascii_case(p),
        })
    }

    /// The patterns that would remove a member holding an answer's shape.
    pub fn structural(&self) -> Vec<&str> {
        self.naming_any_of(STRUCTURAL_NAMES)
    }

    /// The patterns that would remove a header framing or labelling an answer's body.
    pub fn framing(&self) -> Vec<&str> {
        self.naming_any_of(FRAMING_NAMES)
    }

    fn naming_any_of(&self, names: &[&str]) -> Vec<&str> {
        self.patterns
            .iter()
            .filter(|p| {
                let one = KeyPatterns::new([p.as_str()]);
                names.iter().any(|name| one.matches(name))
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
    fn a_leading_star_matches_a_suffix_in_any_case() {
        let p = KeyPatterns::new(["*.token"]);
        assert!(p.matches("my.custom.token"));
        assert!(p.matches("S3.SIGNER.TOKEN"));
        assert!(p.matches(".token"));
        assert!(!p.matches("token"));
        assert!(!p.matches("my.token-expires-at"));
    }

    #[test]
    fn the_defaults_hold_every_clients_spelling_of_a_secret() {
        let p = KeyPatterns::default();
        for name in [
            "adls.account-key",
            "adls.sas-token",
            "adls.sas-token.account1",
            "adls.connection-string",
            "adls.client-secret",
            "adls.token",
            "adls.credential",
            "rest.secret-access-key",
            "rest.session-token",
            "s3.sse.key",
            "oauth2.token",
            "s3.signer.token",
            "password",
            "secret",
            "aws_secret_access_key",
        ] {
            assert!(p.matches(name), "{name}");
        }
        // What an answer's shape, a client's settings or the caller's own OAuth answer hold.
        for name in [
            "metadata-location",
            "s3.endpoint",
            "token-type",
            "access_token",
            "oauth2-server-uri",
            "rest.signing-region",
        ] {
            assert!(!p.matches(name), "{name}");
        }
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

    #[test]
    fn patterns_that_would_remove_a_framing_header_are_named() {
        assert!(KeyPatterns::default().framing().is_empty());
        let p = KeyPatterns::new([
            "x-secret",
            "Content-Type",
            "content-*",
            "*-encoding",
            "date",
            "etag",
            "x-cache",
            "*",
        ]);
        assert_eq!(
            p.framing(),
            ["content-type", "content-*", "*-encoding", "date", "*"]
        );
    }
}
