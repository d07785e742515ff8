//! Headers named like secrets. A catalog is not expected to send credentials in headers, but
//! under `strip` and `inject` a header is no safer a place for one than a body member: every
//! answer loses each header the strip patterns name, and those that carry a credential in HTTP
//! itself (`Authorization`, AWS's session token), whatever the route and whoever made the answer.

use http::header::{HeaderMap, HeaderName};

use super::patterns::KeyPatterns;

/// Headers that carry a credential whatever the strip patterns say.
const CREDENTIAL_HEADERS: [&str; 3] = [
    "authorization",
    "proxy-authorization",
    "x-amz-security-token",
];

/// Removes every header named like a secret; says how many went.
pub fn without_secret_headers(headers: &mut HeaderMap, secret: &KeyPatterns) -> usize {
    let named: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_secret(name, secret))
        .cloned()
        .collect();
    for name in &named {
        headers.remove(name);
    }
    named.len()
}

pub fn is_secret(name: &HeaderName, secret: &KeyPatterns) -> bool {
    CREDENTIAL_HEADERS.contains(&name.as_str()) || secret.matches(name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn headers_named_like_secrets_go_and_the_rest_stay() {
        let mut headers = HeaderMap::new();
        for name in [
            "s3.secret-access-key",
            "Token",
            "x-amz-security-token",
            "authorization",
            "gcs.oauth2.token",
            "content-type",
            "etag",
            "x-request-id",
        ] {
            headers.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static("v"),
            );
        }
        assert_eq!(
            without_secret_headers(&mut headers, &KeyPatterns::default()),
            5
        );
        let mut left: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
        left.sort();
        assert_eq!(left, ["content-type", "etag", "x-request-id"]);
    }
}
