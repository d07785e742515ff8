//! Content codings a client accepts (RFC 9110 §12.5.3): icecache keeps one gzip copy per entry
//! and serves it only to a client whose `Accept-Encoding` gives gzip a non-zero weight.

use http::header::{HeaderMap, ACCEPT_ENCODING};

/// Whether `Accept-Encoding` takes gzip: gzip listed with q > 0, or not listed and `*` with
/// q > 0. An explicit `gzip;q=0` wins over any `*`.
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    let mut gzip = None;
    let mut star = None;
    for coding in headers
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let mut parts = coding.split(';');
        let name = parts.next().unwrap_or("").trim();
        let weight = parts
            .filter_map(|p| {
                let (key, value) = p.split_once('=')?;
                key.trim()
                    .eq_ignore_ascii_case("q")
                    .then(|| value.trim().parse::<f32>().ok())
                    .flatten()
            })
            .next_back()
            .unwrap_or(1.0);
        let accepted = weight > 0.0;
        if name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip") {
            gzip = Some(gzip.unwrap_or(true) && accepted);
        } else if name == "*" {
            star = Some(star.unwrap_or(true) && accepted);
        }
    }
    gzip.or(star).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn gzip_is_accepted_when_listed_with_a_weight() {
        assert!(accepts_gzip(&with("gzip, deflate")));
        assert!(accepts_gzip(&with("br;q=1.0, GZIP;q=0.5")));
        assert!(accepts_gzip(&with("*")));
        assert!(!accepts_gzip(&with("deflate, br")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn a_zero_weight_for_gzip_wins_over_a_star() {
        assert!(!accepts_gzip(&with("gzip;q=0")));
        assert!(!accepts_gzip(&with("gzip;q=0, *")));
        assert!(!accepts_gzip(&with("*, gzip;q=0")));
        assert!(!accepts_gzip(&with("GZIP; Q=0.000, *;q=1")));
        assert!(!accepts_gzip(&with("*;q=0")));
    }
}
