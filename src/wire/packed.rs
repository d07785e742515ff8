//! Several header fields carried in one field's value, for HTTP/1.x heads built once per cache
//! entry and copied to each answer.
//!
//! hyper writes an HTTP/1.x field as its name, `: `, its value as it is, and CRLF. A value that
//! holds `CRLF name: value` goes out as further fields, spelled exactly as written: `ETag` in
//! that case, which the Iceberg Java client 1.11.0 reads case-sensitively, with no case map on
//! the answer (hyper's encoder otherwise looks every name it writes up in that map). One field
//! in the map instead of three: less to copy, drop and write per answer.
//!
//! Every piece is a `HeaderName` or `HeaderValue`, which hold no CR, LF or NUL, so the only line
//! breaks are the ones written here, each followed by a valid name: the carrier cannot split an
//! answer otherwise. HTTP/2 carries each field as its own (a line break in a value is malformed
//! there), so a packed head is for HTTP/1.x answers only.

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};

/// How an answer was produced (`cache::phase`).
pub static X_CACHE: HeaderName = HeaderName::from_static("x-cache");
/// RFC 9211's standard form of what `x-cache` says.
pub static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// The fields a hit's head packs into one: `x-cache` carries `ETag` and `Cache-Status`. A policy
/// that strips any of them by name keeps them apart, where the strip finds them.
pub static PACKED_NAMES: [&HeaderName; 3] = [&X_CACHE, &header::ETAG, &CACHE_STATUS];

/// How `name` is spelled on the wire in a packed value: `ETag` as the Java client reads it,
/// every other name as `http` holds it (lower case).
fn spelled(name: &HeaderName) -> &str {
    if name == header::ETAG {
        "ETag"
    } else {
        name.as_str()
    }
}

/// The value of `first` followed by the fields of `rest`, each on a line of its own; `None` when
/// a value is not UTF-8 (obs-text), which a packed value cannot hold: the fields are then kept
/// apart.
pub fn pack(first: &HeaderValue, rest: &[(&HeaderName, &HeaderValue)]) -> Option<HeaderValue> {
    let length = first.len()
        + rest
            .iter()
            .map(|(name, value)| 4 + name.as_str().len() + value.len())
            .sum::<usize>();
    let mut bytes = BytesMut::with_capacity(length);
    bytes.put_slice(first.as_bytes());
    for (name, value) in rest {
        bytes.put_slice(b"\r\n");
        bytes.put_slice(spelled(name).as_bytes());
        bytes.put_slice(b": ");
        bytes.put_slice(value.as_bytes());
    }
    let bytes: Bytes = bytes.freeze();
    std::str::from_utf8(&bytes).ok()?;
    // SAFETY: `from_maybe_shared_unchecked` asks for UTF-8, checked just above. The value
    // skips `HeaderValue`'s check for line breaks on purpose; the module's comment says why no
    // break but those written here can be in it.
    Some(unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_follow_the_first_value_each_on_a_line_of_its_own() {
        let tag = HeaderValue::from_static("\"abc\"");
        let status = HeaderValue::from_static("icecache; hit");
        let packed = pack(
            &HeaderValue::from_static("HIT"),
            &[(&header::ETAG, &tag), (&CACHE_STATUS, &status)],
        )
        .expect("packed");
        assert_eq!(
            packed.as_bytes(),
            b"HIT\r\nETag: \"abc\"\r\ncache-status: icecache; hit"
        );
    }

    #[test]
    fn nothing_to_add_is_the_first_value() {
        let first = HeaderValue::from_static("HIT");
        assert_eq!(pack(&first, &[]).expect("packed"), first);
    }

    #[test]
    fn a_value_that_is_not_utf8_is_not_packed() {
        let obs_text = HeaderValue::from_bytes(b"\"caf\xe9\"").expect("obs-text is a value");
        assert!(pack(
            &HeaderValue::from_static("HIT"),
            &[(&header::ETAG, &obs_text)]
        )
        .is_none());
    }
}
