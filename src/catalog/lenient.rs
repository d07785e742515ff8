//! What a lenient catalog may read a path as. Servers decode escapes (some more than once, or
//! behind a proxy that decoded first), fold case, merge slashes, resolve dot segments and drop
//! `;parameters` before they route; icecache's own routing reads a path exactly. Where the two
//! may part, icecache takes the safe side: a read that may reach the catalog's API loses the
//! catalog's validators, and one that may reach its `/v1/config` is rewritten like it.

/// How many rounds of percent-decoding a path is read through.
const DECODINGS: usize = 3;

/// Whether a catalog might read `path` as one under `/v1/`: `v1` anywhere, once decoded and
/// folded (fail closed: such a read only loses its validators).
pub fn may_be_the_api(path: &str) -> bool {
    folded(path).windows(2).any(|pair| pair == b"v1")
}

/// Whether a catalog might read `path` as `/v1/config`.
pub fn may_be_config(path: &str) -> bool {
    let folded = folded(path);
    let mut segments: Vec<&[u8]> = Vec::new();
    for segment in folded.split(|&b| b == b'/' || b == b'\\') {
        let segment = segment.split(|&b| b == b';').next().unwrap_or_default();
        match segment {
            b"" | b"." => {}
            b".." => {
                segments.pop();
            }
            _ => segments.push(segment),
        }
    }
    segments == [&b"v1"[..], &b"config"[..]]
}

/// `path` percent-decoded up to `DECODINGS` times, in ASCII lower case.
fn folded(path: &str) -> Vec<u8> {
    let mut bytes = path.as_bytes().to_vec();
    for _ in 0..DECODINGS {
        let decoded = decode_once(&bytes);
        if decoded == bytes {
            break;
        }
        bytes = decoded;
    }
    bytes.make_ascii_lowercase();
    bytes
}

fn decode_once(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = match bytes.get(at..at + 3) {
            Some(&[b'%', high, low]) => hex(high).zip(hex(low)).map(|(h, l)| (h * 16 + l) as u8),
            _ => None,
        };
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                at += 3;
            }
            None => {
                decoded.push(bytes[at]);
                at += 1;
            }
        }
    }
    decoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_a_catalog_may_route_to_its_api_is_taken_for_it() {
        for path in [
            "/v1/p/namespaces/db/tables/t/",
            "//v1/namespaces/db/tables/t",
            "/./v1/namespaces/db/tables/t",
            "/x/../v1/namespaces/db/tables/t",
            "/%76%31/namespaces/db/tables/t",
            "/v%31/namespaces/db/tables/t",
            "/%2576%2531/namespaces/db/tables/t",
            "/v%2531/namespaces/db/tables/t",
            "/V1/namespaces/db/tables/t",
            "/iceberg/v1/namespaces/db/tables/t",
        ] {
            assert!(may_be_the_api(path), "{path}");
        }
    }

    #[test]
    fn a_path_that_spells_no_version_is_not_the_api() {
        for path in [
            "/",
            "/healthz",
            "/api/management/catalogs",
            "/v2/x",
            "/%7",
            "/v%3",
        ] {
            assert!(!may_be_the_api(path), "{path}");
        }
    }

    #[test]
    fn every_spelling_of_config_a_catalog_may_read_is_config() {
        for path in [
            "/v1/config",
            "/V1/config",
            "/v1/config/",
            "/v1/./config",
            "/v1/config;x",
            "/%76%31/config",
            "/v1/%63onfig",
            "/v1/%2563onfig",
            "//v1//config",
            "/x/../v1/config",
            "/v1/p/../config",
        ] {
            assert!(may_be_config(path), "{path}");
        }
    }

    #[test]
    fn other_paths_are_not_config() {
        for path in [
            "/v1/configs",
            "/v1/p/config",
            "/config",
            "/v1/config/x",
            "/v1/namespaces",
        ] {
            assert!(!may_be_config(path), "{path}");
        }
    }
}
