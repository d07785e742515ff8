//! Content codings: which a client accepts (RFC 9110 §12.5.3; icecache keeps one gzip copy per
//! entry and serves it only to a client whose `Accept-Encoding` gives gzip a non-zero weight),
//! and undoing the one a catalog applied anyway when icecache must read an answer.

use std::io::Read;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum DecodeError {
    #[error("the catalog's answer is in a content coding icecache cannot read ({0})")]
    Unsupported(String),
    #[error("the catalog's {coding} answer does not decode")]
    Corrupt { coding: String },
    #[error("the catalog's answer decodes to more than {limit} bytes")]
    TooLarge { limit: usize },
}

/// The body with its `Content-Encoding` undone (gzip or deflate), at most `limit` bytes; the
/// header is removed. A body in the identity encoding comes back as it is.
pub fn decode(headers: &mut HeaderMap, body: Bytes, limit: usize) -> Result<Bytes, DecodeError> {
    let codings: Vec<String> = headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase())
        .flat_map(|v| {
            v.split(',')
                .map(|c| c.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .filter(|c| !c.is_empty() && c != "identity")
        .collect();
    let decoded = match codings.as_slice() {
        [] => return Ok(body),
        [one] if one == "gzip" || one == "x-gzip" => {
            read_limited(flate2::read::MultiGzDecoder::new(&body[..]), limit, one)?
        }
        [one] if one == "deflate" => {
            match read_limited(flate2::read::ZlibDecoder::new(&body[..]), limit, one) {
                Ok(bytes) => bytes,
                // Some servers send raw deflate under this name.
                Err(DecodeError::Corrupt { .. }) => {
                    read_limited(flate2::read::DeflateDecoder::new(&body[..]), limit, one)?
                }
                Err(e) => return Err(e),
            }
        }
        other => return Err(DecodeError::Unsupported(other.join(", "))),
    };
    headers.remove(CONTENT_ENCODING);
    Ok(decoded)
}

fn read_limited(reader: impl Read, limit: usize, coding: &str) -> Result<Bytes, DecodeError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|_| DecodeError::Corrupt {
            coding: coding.to_owned(),
        })?;
    if out.len() > limit {
        return Err(DecodeError::TooLarge { limit });
    }
    Ok(Bytes::from(out))
}

/// RFC 9110 §12.4.2: `0` to `1` with at most three decimals, nothing else (no sign, no
/// exponent, no `inf`).
fn qvalue(text: &str) -> Option<f32> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let fits = matches!(whole, "0" | "1")
        && fraction.len() <= 3
        && fraction.bytes().all(|b| b.is_ascii_digit())
        && (whole == "0" || fraction.bytes().all(|b| b == b'0'));
    fits.then(|| text.parse().ok()).flatten()
}

/// Whether `Accept-Encoding` takes gzip: gzip listed with q > 0, or not listed and `*` with
/// q > 0. An explicit `gzip;q=0` wins over any `*`.
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    // Only a coding named gzip (or x-gzip) or `*` can take gzip: a field without either, such
    // as `identity`, is not parsed.
    let may_name_gzip = |value: &HeaderValue| {
        let bytes = value.as_bytes();
        bytes.contains(&b'*') || bytes.windows(4).any(|w| w.eq_ignore_ascii_case(b"gzip"))
    };
    if !headers.get_all(ACCEPT_ENCODING).iter().any(may_name_gzip) {
        return false;
    }
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
        // A `q` that is not a qvalue, or given twice, takes nothing (fail closed: identity is
        // always at hand). Counted as they come: no list per coding.
        let (count, last) = parts
            .filter_map(|p| {
                let (key, value) = p.split_once('=')?;
                key.trim()
                    .eq_ignore_ascii_case("q")
                    .then(|| qvalue(value.trim()))
            })
            .fold((0, None), |(count, _), weight| (count + 1, weight));
        let weight = match (count, last) {
            (0, _) => 1.0,
            (1, Some(weight)) => weight,
            _ => 0.0,
        };
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

    fn with(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_str(value).unwrap());
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
    fn a_gzip_answer_is_decoded_and_its_header_removed() {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(b"{\"a\":1}").unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, http::HeaderValue::from_static("gzip"));
        let body = decode(&mut headers, Bytes::from(encoder.finish().unwrap()), 100).unwrap();
        assert_eq!(&body[..], b"{\"a\":1}");
        assert!(headers.get(CONTENT_ENCODING).is_none());
        let mut br = HeaderMap::new();
        br.insert(CONTENT_ENCODING, http::HeaderValue::from_static("br"));
        assert!(decode(&mut br, Bytes::from_static(b"x"), 100).is_err());
        let mut bomb = HeaderMap::new();
        bomb.insert(CONTENT_ENCODING, http::HeaderValue::from_static("gzip"));
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&vec![b'x'; 10_000]).unwrap();
        let bomb_body = Bytes::from(encoder.finish().unwrap());
        assert!(matches!(
            decode(&mut bomb, bomb_body, 1000),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_field_naming_no_gzip_takes_none_and_any_spelling_of_gzip_is_read() {
        assert!(!accepts_gzip(&with("identity")));
        assert!(!accepts_gzip(&with("deflate;q=1, br")));
        assert!(accepts_gzip(&with("x-gzip")));
        assert!(accepts_gzip(&with("deflate, X-GZip;q=0.5")));
        let mut lines = with("identity");
        lines.append(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        assert!(accepts_gzip(&lines));
    }

    #[test]
    fn a_zero_weight_for_gzip_wins_over_a_star() {
        assert!(!accepts_gzip(&with("gzip;q=0")));
        assert!(!accepts_gzip(&with("gzip;q=0, *")));
        assert!(!accepts_gzip(&with("*, gzip;q=0")));
        assert!(!accepts_gzip(&with("GZIP; Q=0.000, *;q=1")));
        assert!(!accepts_gzip(&with("*;q=0")));
    }

    #[test]
    fn a_weight_that_is_no_number_takes_nothing() {
        assert!(!accepts_gzip(&with("gzip;q=abc")));
        assert!(!accepts_gzip(&with("*;q=")));
        assert!(!accepts_gzip(&with("gzip;q=abc, *;q=1")));
        assert!(!accepts_gzip(&with("gzip;q=0.5;q=x;q=1")));
        for odd in [
            "inf", "infinity", "1e0", "+1", ".5", "0.5e1", "2", "1.001", "0.1234", "NaN",
        ] {
            assert!(!accepts_gzip(&with(&format!("gzip;q={odd}"))), "{odd}");
        }
        for fine in ["1", "1.", "1.000", "0.5", "0.001", "0."] {
            assert_eq!(
                accepts_gzip(&with(&format!("gzip;q={fine}"))),
                fine != "0.",
                "{fine}"
            );
        }
    }
}
