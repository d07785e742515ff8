//! icecache's own entity tags and `If-None-Match` evaluation (RFC 9110 §8.8.3 and §13.1.2).

use http::HeaderValue;

/// icecache's strong ETag of a served body: BLAKE3 over the representation's name and the exact
/// bytes, so `snapshots=all` and `snapshots=refs` never share a tag even when their bodies agree.
pub fn strong_etag(representation: &str, body: &[u8]) -> HeaderValue {
    strong_etag_of(representation, &[body])
}

/// `strong_etag` of a body sent in pieces, without joining them.
pub fn strong_etag_of(representation: &str, pieces: &[&[u8]]) -> HeaderValue {
    let mut hasher = blake3::Hasher::new();
    hasher.update(representation.as_bytes());
    hasher.update(&[0]);
    for piece in pieces {
        hasher.update(piece);
    }
    let hash = hasher.finalize();
    let hex = hash.to_hex();
    // 128 bits of the hash are plenty to tell versions apart and keep the header short.
    let tag = format!("\"{}\"", &hex.as_str()[..32]);
    HeaderValue::from_str(&tag).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

/// Whether an `If-None-Match` field (all its lines) matches `current`, using the weak
/// comparison the RFC prescribes for this header. Several lines are one field (RFC 9110 §5.3),
/// read joined. A field that does not parse matches nothing, so it can only ever cost a full
/// response, never a wrong 304.
pub fn if_none_match_matches<'a>(
    fields: impl IntoIterator<Item = &'a HeaderValue>,
    current: &HeaderValue,
) -> bool {
    let mut fields = fields.into_iter();
    let Some(first) = fields.next() else {
        return false;
    };
    let Some(second) = fields.next() else {
        return field_matches(first.as_bytes(), current.as_bytes());
    };
    let mut joined = first.as_bytes().to_vec();
    for line in std::iter::once(second).chain(fields) {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(line.as_bytes());
    }
    field_matches(&joined, current.as_bytes())
}

fn field_matches(field: &[u8], exact: &[u8]) -> bool {
    // The common case, a client sending back the tag it was given, needs no parsing of the
    // field (the tag must still be one: anything else is read as a list below).
    let current = || opaque_tag(exact);
    if field == exact && current().is_some() {
        return true;
    }
    // Read as bytes: a tag may hold obs-text (0x80 and up), which need not be UTF-8.
    if field.trim_ascii() == b"*" {
        return true;
    }
    parse_list(field)
        .map(|tags| {
            let current = current();
            tags.iter().any(|tag| Some(*tag) == current)
        })
        .unwrap_or(false)
}

/// The opaque part of an entity tag (`W/"x"` and `"x"` both give `x`), or None when the value is
/// not an entity tag.
fn opaque_tag(value: &[u8]) -> Option<&[u8]> {
    let value = value.strip_prefix(b"W/").unwrap_or(value);
    let inner = value.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    // etagc = %x21 / %x23-7E / obs-text: every byte from 0x21 up but `"` and DEL. Folded
    // without branches, so that a hit's 34-byte tag is checked a vector at a time.
    inner
        .iter()
        .fold(true, |ok, &c| ok & (c >= 0x21) & (c != b'"') & (c != 0x7f))
        .then_some(inner)
}

/// Parses `#entity-tag`: a comma-separated list, optional whitespace, empty elements allowed.
fn parse_list(bytes: &[u8]) -> Option<Vec<&[u8]>> {
    let mut tags = Vec::new();
    let mut i = 0;
    // A tag must be followed by a comma (or the end), whitespace aside: `"a""b"` is no list.
    let mut after_tag = false;
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' => i += 1,
            b',' => {
                after_tag = false;
                i += 1;
            }
            _ if after_tag => return None,
            _ => {
                let start = i;
                if bytes[i..].starts_with(b"W/") {
                    i += 2;
                }
                if bytes.get(i) != Some(&b'"') {
                    return None;
                }
                let close = bytes[i + 1..].iter().position(|&c| c == b'"')? + i + 1;
                tags.push(opaque_tag(&bytes[start..=close])?);
                i = close + 1;
                after_tag = true;
            }
        }
    }
    Some(tags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hv(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn exact_tag_matches() {
        assert!(if_none_match_matches([&hv("\"abc\"")], &hv("\"abc\"")));
    }

    #[test]
    fn weak_comparison_ignores_the_weak_flag() {
        assert!(if_none_match_matches([&hv("W/\"abc\"")], &hv("\"abc\"")));
    }

    #[test]
    fn any_member_of_a_list_matches() {
        assert!(if_none_match_matches(
            [&hv("\"x\", W/\"y\" ,\"abc\"")],
            &hv("\"abc\"")
        ));
        assert!(if_none_match_matches(
            [&hv("\"x\""), &hv("\"abc\"")],
            &hv("\"abc\"")
        ));
    }

    #[test]
    fn star_matches_any_current_representation() {
        assert!(if_none_match_matches([&hv("*")], &hv("\"abc\"")));
    }

    #[test]
    fn other_or_malformed_tags_do_not_match() {
        assert!(!if_none_match_matches([&hv("\"abd\"")], &hv("\"abc\"")));
        assert!(!if_none_match_matches([&hv("abc")], &hv("\"abc\"")));
        assert!(!if_none_match_matches([&hv("\"abc")], &hv("\"abc\"")));
        assert!(!if_none_match_matches(
            [&hv("\"abc\" junk")],
            &hv("\"abc\"")
        ));
        assert!(!if_none_match_matches(std::iter::empty(), &hv("\"abc\"")));
    }

    #[test]
    fn a_list_with_a_tag_of_obs_text_still_matches_its_other_tags() {
        let field = HeaderValue::from_bytes(b"\"\xe9\", \"abc\"").unwrap();
        assert!(if_none_match_matches([&field], &hv("\"abc\"")));
        let lone = HeaderValue::from_bytes(b"W/\"\xe9\xff\"").unwrap();
        assert!(!if_none_match_matches([&lone], &hv("\"abc\"")));
    }

    #[test]
    fn tags_not_separated_by_commas_are_no_list() {
        for field in [
            "\"x\"\"abc\"",
            "\"abc\"\"x\"",
            "\"\"\"abc\"",
            "\"x\" \"abc\"",
            "W/\"x\"W/\"abc\"",
        ] {
            assert!(
                !if_none_match_matches([&hv(field)], &hv("\"abc\"")),
                "{field}"
            );
        }
        assert!(if_none_match_matches(
            [&hv("\"x\" , \"abc\"")],
            &hv("\"abc\"")
        ));
        assert!(if_none_match_matches([&hv(",\"abc\",")], &hv("\"abc\"")));
    }

    #[test]
    fn several_lines_are_one_field() {
        let tag = hv("\"abc\"");
        assert!(if_none_match_matches([&hv("\"x\""), &tag], &tag));
        assert!(!if_none_match_matches([&tag, &hv("\"a\"\"b\"")], &tag));
        assert!(!if_none_match_matches([&hv("\"a\"\"b\""), &tag], &tag));
        assert!(!if_none_match_matches([&hv("*"), &hv("\"x\"")], &tag));
        assert!(!if_none_match_matches([&hv("*, \"x\"")], &tag));
    }

    #[test]
    fn a_tag_holds_exactly_the_bytes_rfc_9110_allows() {
        for c in 0..=255u8 {
            let allowed = c == 0x21 || (0x23..=0x7e).contains(&c) || c >= 0x80;
            assert_eq!(
                opaque_tag(&[b'"', c, b'"']).is_some(),
                allowed,
                "byte {c:#x}"
            );
        }
    }

    #[test]
    fn a_current_value_that_is_no_tag_is_not_matched_by_its_own_bytes() {
        assert!(!if_none_match_matches([&hv("abc")], &hv("abc")));
        assert!(!if_none_match_matches([&hv("\"a\"b\"")], &hv("\"a\"b\"")));
        assert!(if_none_match_matches([&hv("*")], &hv("abc")));
    }

    #[test]
    fn a_body_in_pieces_has_the_tag_of_the_whole() {
        assert_eq!(
            strong_etag("all", b"abcdef"),
            strong_etag_of("all", &[b"ab", b"", b"cdef"])
        );
    }

    #[test]
    fn representations_get_distinct_tags_for_equal_bodies() {
        assert_ne!(strong_etag("all", b"{}"), strong_etag("refs", b"{}"));
        assert_eq!(strong_etag("all", b"{}"), strong_etag("all", b"{}"));
        assert_ne!(strong_etag("all", b"{}"), strong_etag("all", b"{ }"));
    }

    proptest! {
        #[test]
        fn a_tag_always_matches_a_list_that_contains_it(
            others in proptest::collection::vec("[a-z0-9]{1,12}", 0..5),
            tag in "[a-z0-9]{1,12}",
            weak in any::<bool>(),
            at in 0usize..5,
        ) {
            let mut items: Vec<String> = others.iter().map(|o| format!("\"{o}\"")).collect();
            let me = if weak { format!("W/\"{tag}\"") } else { format!("\"{tag}\"") };
            items.insert(at.min(items.len()), me);
            let field = hv(&items.join(", "));
            let current = hv(&format!("\"{tag}\""));
            prop_assert!(if_none_match_matches([&field], &current));
        }

        #[test]
        fn parsing_arbitrary_fields_never_panics_nor_matches_without_the_tag(field in "[ -~]{0,64}") {
            if let Ok(v) = HeaderValue::from_str(&field) {
                let matched = if_none_match_matches([&v], &hv("\"zzzzzzzz\""));
                prop_assert!(!matched || field.contains("zzzzzzzz") || field.trim() == "*");
            }
        }
    }
}
