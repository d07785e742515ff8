//! Throttling answers, as catalogs spell them: a `429`, or AWS Glue's `400` whose
//! `x-amzn-errortype` names a `ThrottlingException`. Either reaches the client as a `429` with
//! `Retry-After` (the catalog's when it sent a valid one), so clients' retry strategies (the
//! Iceberg Java client retries 429s) back off instead of failing on a `400`.

use http::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use http::StatusCode;

/// What a client is told to wait when the catalog said nothing (Glue sends no `Retry-After`).
pub const DEFAULT_RETRY_AFTER_SECONDS: u64 = 1;

/// The longest `Retry-After` passed on: a catalog's value past it is read as a mistake.
const MAX_RETRY_AFTER_SECONDS: u64 = 3600;

static AMZN_ERROR_TYPE: http::HeaderName = http::HeaderName::from_static("x-amzn-errortype");

/// Whether an answer's head says the catalog is throttling.
pub fn is_throttling(status: StatusCode, headers: &HeaderMap) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::BAD_REQUEST
            && headers.get(&AMZN_ERROR_TYPE).is_some_and(|v| {
                // `ThrottlingException`, or with AWS's `:<documentation URL>` after it.
                let kind = v
                    .as_bytes()
                    .split(|b| *b == b':')
                    .next()
                    .unwrap_or_default();
                kind.eq_ignore_ascii_case(b"ThrottlingException")
            }))
}

/// The `Retry-After` a throttled client gets: the catalog's delay in seconds when it sent one
/// icecache can read (at most an hour), else the default. An HTTP-date is replaced too: the
/// clocks of the catalog and the client need not agree.
pub fn retry_after(headers: &HeaderMap) -> HeaderValue {
    let seconds = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s <= MAX_RETRY_AFTER_SECONDS)
        .unwrap_or(DEFAULT_RETRY_AFTER_SECONDS);
    HeaderValue::from(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_429_is_throttling() {
        assert!(is_throttling(StatusCode::TOO_MANY_REQUESTS, &headers(&[])));
    }

    #[test]
    fn glues_400_naming_a_throttling_exception_is_throttling_in_any_spelling() {
        for kind in [
            "ThrottlingException",
            "throttlingexception",
            "ThrottlingException:http://internal.amazon.com/coral/com.amazonaws.glue/",
        ] {
            let h = headers(&[("x-amzn-errortype", kind)]);
            assert!(is_throttling(StatusCode::BAD_REQUEST, &h), "{kind}");
        }
    }

    #[test]
    fn other_refusals_are_not_throttling() {
        let glue = headers(&[("x-amzn-errortype", "InvalidInputException")]);
        assert!(!is_throttling(StatusCode::BAD_REQUEST, &glue));
        assert!(!is_throttling(StatusCode::BAD_REQUEST, &headers(&[])));
        let named = headers(&[("x-amzn-errortype", "ThrottlingExceptionally")]);
        assert!(!is_throttling(StatusCode::BAD_REQUEST, &named));
        // A 503 with Retry-After is the spec's own answer: it passes as the catalog sent it.
        let unavailable = headers(&[("retry-after", "7")]);
        assert!(!is_throttling(
            StatusCode::SERVICE_UNAVAILABLE,
            &unavailable
        ));
    }

    #[test]
    fn the_catalogs_delay_is_kept_when_it_can_be_read() {
        assert_eq!(retry_after(&headers(&[("retry-after", "7")])), "7");
        assert_eq!(retry_after(&headers(&[("retry-after", " 0 ")])), "0");
    }

    #[test]
    fn no_unreadable_or_absurd_delay_is_passed_on() {
        for value in [
            "soon",
            "-1",
            "1.5",
            "86400",
            "Wed, 21 Oct 2026 07:28:00 GMT",
        ] {
            let h = headers(&[("retry-after", value)]);
            assert_eq!(retry_after(&h), "1", "{value}");
        }
        assert_eq!(retry_after(&headers(&[])), "1");
    }
}
