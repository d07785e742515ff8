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
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// How an answer was produced (`cache::phase`).
pub static X_CACHE: HeaderName = HeaderName::from_static("x-cache");
/// RFC 9211's standard form of what `x-cache` says.
pub static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// The fields a hit's head packs into one: `x-cache` carries `ETag` and `Cache-Status`. A policy
/// that strips any of them by name keeps them apart, where the strip finds them.
pub static PACKED_NAMES: [&HeaderName; 3] = [&X_CACHE, &header::ETAG, &CACHE_STATUS];

/// Names hyper's HTTP/1.x encoder reads in an answer's map to frame and close it (and to add
/// `Date` when absent): never packed, or hyper would frame the answer without them.
pub static READ_BY_THE_ENCODER: [HeaderName; 5] = [
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
    header::DATE,
    header::TRAILER,
];

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

/// `head` with its fields packed into one: the first field not named `ETag` carries, after its
/// own value, every other field that `apart` does not hold back, in the order of `head`. Fields
/// held back, and those the encoder reads (`READ_BY_THE_ENCODER`), stay fields of their own,
/// where a later step that edits the answer's fields (a strip) finds them. `None` when a value
/// is not UTF-8, or when nothing but `ETag` could be packed (a carrier named `ETag` would be
/// written in lower case).
pub fn pack_fields(head: &HeaderMap, apart: impl Fn(&HeaderName) -> bool) -> Option<HeaderMap> {
    let stays = |name: &HeaderName| READ_BY_THE_ENCODER.contains(name) || apart(name);
    let carrier = head
        .keys()
        .find(|name| *name != header::ETAG && !stays(name))?;
    let mut first = None;
    let mut rest = Vec::with_capacity(head.len());
    for (name, value) in head {
        if stays(name) {
            continue;
        }
        match first {
            None if name == carrier => first = Some(value),
            _ => rest.push((name, value)),
        }
    }
    let packed = pack(first?, &rest)?;
    let mut out = HeaderMap::with_capacity(head.len() - rest.len());
    for (name, value) in head {
        if stays(name) {
            out.append(name.clone(), value.clone());
        } else if name == carrier && !out.contains_key(carrier) {
            out.append(name.clone(), packed.clone());
        }
    }
    Some(out)
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

    fn head(fields: &[(&str, &str)]) -> HeaderMap {
        let mut head = HeaderMap::new();
        for (name, value) in fields {
            head.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        head
    }

    fn fields(head: &HeaderMap) -> Vec<(&str, &[u8])> {
        head.iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes()))
            .collect()
    }

    #[test]
    fn every_field_but_those_the_encoder_reads_goes_into_the_first() {
        let packed = pack_fields(
            &head(&[
                ("content-type", "application/json"),
                ("vary", "accept-encoding"),
                ("content-length", "12"),
                ("x-cache", "HIT"),
                ("etag", "\"abc\""),
            ]),
            |_| false,
        )
        .expect("packed");
        assert_eq!(
            fields(&packed),
            [
                (
                    "content-type",
                    &b"application/json\r\nvary: accept-encoding\r\nx-cache: HIT\r\nETag: \"abc\""
                        [..]
                ),
                ("content-length", b"12"),
            ]
        );
    }

    #[test]
    fn fields_held_back_stay_fields_of_their_own_in_their_place() {
        let packed = pack_fields(
            &head(&[
                ("x-secret", "s"),
                ("content-type", "application/json"),
                ("date", "then"),
                ("x-secret", "t"),
                ("vary", "accept-encoding"),
            ]),
            |name| name.as_str() == "x-secret",
        )
        .expect("packed");
        assert_eq!(
            fields(&packed),
            [
                ("x-secret", &b"s"[..]),
                ("x-secret", b"t"),
                ("content-type", b"application/json\r\nvary: accept-encoding"),
                ("date", b"then"),
            ]
        );
    }

    #[test]
    fn etag_never_carries_and_alone_is_not_packed() {
        let packed =
            pack_fields(&head(&[("etag", "\"a\""), ("vary", "x")]), |_| false).expect("packed");
        assert_eq!(fields(&packed), [("vary", &b"x\r\nETag: \"a\""[..])]);
        assert!(
            pack_fields(&head(&[("etag", "\"a\""), ("content-length", "1")]), |_| {
                false
            })
            .is_none()
        );
    }

    #[test]
    fn every_value_of_a_repeated_name_is_a_line_of_its_own() {
        let packed = pack_fields(
            &head(&[("vary", "a"), ("vary", "b"), ("link", "c")]),
            |_| false,
        )
        .expect("packed");
        assert_eq!(fields(&packed), [("vary", &b"a\r\nvary: b\r\nlink: c"[..])]);
    }

    #[test]
    fn a_head_with_a_value_that_is_not_utf8_is_not_packed() {
        let mut fields = head(&[("content-type", "application/json")]);
        fields.append(
            header::ETAG,
            HeaderValue::from_bytes(b"\"caf\xe9\"").expect("obs-text is a value"),
        );
        assert!(pack_fields(&fields, |_| false).is_none());
    }

    #[test]
    fn nothing_to_pack_is_none() {
        assert!(pack_fields(&head(&[("content-length", "3")]), |_| false).is_none());
        assert!(pack_fields(&head(&[("x-secret", "s")]), |_| true).is_none());
    }
}
