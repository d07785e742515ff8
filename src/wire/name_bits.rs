//! Which names a header map may hold, one bit per name: a hit reads about eight names of a
//! request that holds four or five, and a name whose bit is clear is known absent without
//! hashing it (each look-up in the map's table costs about 115 instructions).
//!
//! The bit comes from a name's length, last byte and middle byte, so two names may share one:
//! a shared bit only costs the look-up it would have cost anyway. A name the map holds always
//! has its bit set, since `HeaderName`s are lower case and the same name gives the same bit.

use http::header::{HeaderMap, HeaderName};

/// The bits of the names of one map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NameBits(u64);

impl NameBits {
    pub fn of<T>(map: &HeaderMap<T>) -> NameBits {
        NameBits(map.keys().fold(0, |bits, name| bits | bit(name)))
    }

    /// False only when the map holds no field named `name`.
    pub fn may_hold(self, name: &HeaderName) -> bool {
        self.0 & bit(name) != 0
    }
}

/// Chosen so that the names a request usually carries (`host`, `authorization`,
/// `if-none-match`, `accept-encoding`, `user-agent`, `accept`, `content-length`,
/// `content-type`, `x-request-id`, `traceparent`) each have a bit no name a hit reads and
/// usually finds absent (`cookie`, `x-api-key`, `connection`) shares.
fn bit(name: &HeaderName) -> u64 {
    let bytes = name.as_str().as_bytes();
    let length = bytes.len();
    let last = bytes.last().copied().unwrap_or(0);
    let middle = bytes.get(length / 2).copied().unwrap_or(0);
    let mixed = length
        .wrapping_mul(11)
        .wrapping_add(usize::from(last))
        .wrapping_add(usize::from(middle).wrapping_mul(5));
    1 << (mixed % 64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{self, HeaderValue};
    use proptest::prelude::*;

    fn map_of(names: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for name in names {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static("v"),
            );
        }
        map
    }

    #[test]
    fn an_empty_map_holds_nothing() {
        let bits = NameBits::of(&HeaderMap::<HeaderValue>::new());
        assert!(!bits.may_hold(&header::AUTHORIZATION));
        assert!(!bits.may_hold(&header::HOST));
    }

    #[test]
    fn the_usual_request_rules_out_the_credentials_it_does_not_carry() {
        let bits = NameBits::of(&map_of(&[
            "host",
            "authorization",
            "if-none-match",
            "accept-encoding",
            "user-agent",
            "accept",
            "content-length",
            "content-type",
            "x-request-id",
            "traceparent",
        ]));
        for absent in ["cookie", "x-api-key", "connection"] {
            let name = HeaderName::from_static(absent);
            assert!(!bits.may_hold(&name), "{absent}");
        }
    }

    proptest! {
        #[test]
        fn every_name_a_map_holds_may_be_held(
            names in proptest::collection::vec("[a-z0-9-]{1,40}", 0..20),
            probe in "[a-z0-9-]{1,40}",
        ) {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let map = map_of(&refs);
            let bits = NameBits::of(&map);
            for name in map.keys() {
                prop_assert!(bits.may_hold(name));
            }
            // A name the bits rule out is one the map does not hold, in any spelling.
            let probe = HeaderName::from_bytes(probe.as_bytes()).unwrap();
            if !bits.may_hold(&probe) {
                prop_assert!(map.get(&probe).is_none());
            }
        }
    }
}
