//! The host a request names: one `Host` line at most (exactly one on HTTP/1.1), agreeing with
//! the target's authority, each a plain `host[:port]`. A request whose host is in doubt is
//! refused before anything reads it (RFC 9112 §3.2, RFC 9113 §8.3.1).

use http::header::{self, HeaderMap};
use http::Version;
use thiserror::Error;

/// Why a request's `Host` cannot be relied on. RFC 9112 §3.2 has a server answer 400: the host
/// becomes `X-Forwarded-Host` and the public URL `/v1/config` hands out, and two readers of two
/// `Host` lines could disagree about which one the request was for.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HostError {
    #[error("an HTTP/1.1 request must carry a Host header")]
    Missing,
    #[error("a request must carry at most one Host header")]
    Repeated,
    #[error("the Host header must be a host with an optional port")]
    Invalid,
    #[error("the request target (or HTTP/2 :authority) must be a host with an optional port")]
    InvalidTarget,
    #[error("the Host header and the request target (or HTTP/2 :authority) name different hosts")]
    Conflicting,
}

/// Checks the host a request names: at most one `Host` line (exactly one on HTTP/1.1), a
/// `host[:port]` without user information, in `Host` and in the target's authority (HTTP/2's
/// `:authority`, an absolute-form target), and the same host in both when both are there
/// (RFC 9113 §8.3.1; for an absolute-form target RFC 9112 §3.2.2 would have the target win,
/// icecache refuses rather than guess which one a client meant). HTTP/1.0 and HTTP/2 requests
/// may leave `Host` out.
pub fn check_host(
    version: Version,
    target: Option<&http::uri::Authority>,
    headers: &HeaderMap,
) -> Result<(), HostError> {
    if target.is_some_and(|authority| !host_and_port(authority.as_str().as_bytes())) {
        return Err(HostError::InvalidTarget);
    }
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = match (hosts.next(), hosts.next()) {
        (None, _) if version == Version::HTTP_11 => return Err(HostError::Missing),
        (None, _) => return Ok(()),
        (Some(_), Some(_)) => return Err(HostError::Repeated),
        (Some(host), None) if host_and_port(host.as_bytes()) => host,
        (Some(_), None) => return Err(HostError::Invalid),
    };
    match target {
        Some(authority)
            if !authority
                .as_str()
                .as_bytes()
                .eq_ignore_ascii_case(host.as_bytes()) =>
        {
            Err(HostError::Conflicting)
        }
        _ => Ok(()),
    }
}

/// `host[:port]` (RFC 9110 §7.2, RFC 3986 §3.2.2), read strictly: hosts are names and
/// addresses, so what RFC 3986 allows beyond them is refused (fail closed). The host is an IPv6
/// address in brackets (with an optional `%25` zone), an `[v…]` future literal, or a name of
/// letters, digits, `-._~` and percent-encodings; no user information, no path, no `,` (a list
/// is what a joined pair of `Host` lines looks like). The port, when there is a `:`, is one to
/// five digits within 16 bits. A byte scan: every request runs it, and `Authority`'s parser
/// copies the value.
pub fn host_and_port(bytes: &[u8]) -> bool {
    let (host_valid, rest) = match bytes.strip_prefix(b"[") {
        Some(inner) => {
            let Some(end) = inner.iter().position(|&b| b == b']') else {
                return false;
            };
            (ip_literal(&inner[..end]), &inner[end + 1..])
        }
        None => {
            // One pass to the first `:`, folding what each byte of the name is.
            let mut end = bytes.len();
            let mut seen = 0u8;
            for (i, &b) in bytes.iter().enumerate() {
                let class = HOST_BYTES[usize::from(b)];
                if class == COLON {
                    end = i;
                    break;
                }
                seen |= class;
            }
            let name = &bytes[..end];
            let valid = !name.is_empty()
                && seen & OTHER == 0
                && (seen & PERCENT == 0 || percent_encoded_whole(name));
            (valid, &bytes[end..])
        }
    };
    let port_fits = match rest {
        [] => true,
        [b':', port @ ..] => {
            (1..=5).contains(&port.len())
                && port.iter().all(u8::is_ascii_digit)
                && port.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0'))
                    <= u32::from(u16::MAX)
        }
        _ => false,
    };
    host_valid && port_fits
}

/// Inside `[…]`: an IPv6 address with an optional zone (`%25` then name bytes, RFC 6874), or
/// an IPvFuture literal (`v`, hex digits, `.`, then name bytes and `:`).
fn ip_literal(literal: &[u8]) -> bool {
    if let [b'v' | b'V', future @ ..] = literal {
        let Some(dot) = future.iter().position(|&b| b == b'.') else {
            return false;
        };
        let (version, tail) = (&future[..dot], &future[dot + 1..]);
        return !version.is_empty()
            && version.iter().all(u8::is_ascii_hexdigit)
            && !tail.is_empty()
            && tail.iter().all(|&b| name_byte(b) || b == b':');
    }
    let (address, zone) = match literal.windows(3).position(|w| w == b"%25") {
        Some(at) => (&literal[..at], Some(&literal[at + 3..])),
        None => (literal, None),
    };
    let address_valid = std::str::from_utf8(address)
        .ok()
        .and_then(|text| text.parse::<std::net::Ipv6Addr>().ok())
        .is_some();
    address_valid && zone.is_none_or(|z| !z.is_empty() && z.iter().all(|&b| name_byte(b)))
}

/// A byte of a host name: a letter, a digit, or `-._~`.
fn name_byte(b: u8) -> bool {
    NAME_BYTES[usize::from(b)]
}

/// `name_byte` as a table: every request's host is scanned with it.
static NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~');
        b += 1;
    }
    table
};

/// What a byte of `host[:port]` is, outside brackets: a name's (no bit), a `%`, the `:` before
/// the port, or none of these (each a bit of its own, so a scan folds them with `|`).
const NAME: u8 = 0;
const PERCENT: u8 = 1;
const OTHER: u8 = 2;
const COLON: u8 = 4;

static HOST_BYTES: [u8; 256] = {
    let mut table = [OTHER; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            b'%' => PERCENT,
            b':' => COLON,
            _ if NAME_BYTES[b] => NAME,
            _ => OTHER,
        };
        b += 1;
    }
    table
};

/// Every `%` starts a percent-encoding: two hex digits follow it.
fn percent_encoded_whole(name: &[u8]) -> bool {
    if !name.contains(&b'%') {
        return true;
    }
    name.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || name
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn hosts(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(
                header::HOST,
                HeaderValue::from_bytes(value.as_bytes()).unwrap(),
            );
        }
        headers
    }

    #[test]
    fn a_name_byte_is_a_letter_a_digit_or_one_of_four_marks() {
        for b in 0..=255u8 {
            let expected = b.is_ascii_alphanumeric() || b"-._~".contains(&b);
            assert_eq!(name_byte(b), expected, "byte {b:#x}");
        }
    }

    #[test]
    fn one_host_with_or_without_a_port_is_accepted() {
        for host in [
            "catalog",
            "catalog.example:8181",
            "127.0.0.1:80",
            "[::1]:8181",
            "[::1]",
            "[::ffff:1.2.3.4]",
            "[fe80::1%25eth0]:8181",
            "[v1.fe]",
            "h%41",
            "catalog.",
        ] {
            assert_eq!(
                check_host(Version::HTTP_11, None, &hosts(&[host])),
                Ok(()),
                "{host}"
            );
        }
    }

    #[test]
    fn http_1_1_without_a_host_is_refused_and_http_1_0_or_2_is_not() {
        assert_eq!(
            check_host(Version::HTTP_11, None, &hosts(&[])),
            Err(HostError::Missing)
        );
        assert_eq!(check_host(Version::HTTP_10, None, &hosts(&[])), Ok(()));
        assert_eq!(check_host(Version::HTTP_2, None, &hosts(&[])), Ok(()));
    }

    #[test]
    fn two_host_lines_are_refused_in_any_version_even_when_equal() {
        for version in [Version::HTTP_10, Version::HTTP_11, Version::HTTP_2] {
            assert_eq!(
                check_host(version, None, &hosts(&["a", "a"])),
                Err(HostError::Repeated)
            );
            assert_eq!(
                check_host(version, None, &hosts(&["a", "b"])),
                Err(HostError::Repeated)
            );
        }
    }

    fn target(authority: &str) -> http::uri::Authority {
        authority.parse().unwrap()
    }

    #[test]
    fn a_target_authority_must_be_host_and_port_too() {
        // hyper hands on only what `http` parses as an authority; of those, these are refused.
        for authority in ["u@h", "u:p@h:80", "h:abc", "h:65536", "h%4"] {
            let Ok(parsed) = authority.parse::<http::uri::Authority>() else {
                continue;
            };
            assert_eq!(
                check_host(Version::HTTP_2, Some(&parsed), &hosts(&[])),
                Err(HostError::InvalidTarget),
                "{authority}"
            );
        }
        assert_eq!(
            check_host(Version::HTTP_2, Some(&target("u@h")), &hosts(&[])),
            Err(HostError::InvalidTarget)
        );
        assert_eq!(
            check_host(Version::HTTP_2, Some(&target("h:8181")), &hosts(&[])),
            Ok(())
        );
    }

    #[test]
    fn host_and_target_must_name_the_same_host() {
        let a = target("catalog:8181");
        assert_eq!(
            check_host(Version::HTTP_2, Some(&a), &hosts(&["CATALOG:8181"])),
            Ok(())
        );
        for host in ["evil.example", "catalog", "catalog:80"] {
            assert_eq!(
                check_host(Version::HTTP_11, Some(&a), &hosts(&[host])),
                Err(HostError::Conflicting),
                "{host}"
            );
        }
    }

    #[test]
    fn ports_fit_sixteen_bits_and_percent_signs_start_an_encoding() {
        for (host, fine) in [
            ("h:65535", true),
            ("h:65536", false),
            ("h:999999999999", false),
            ("h%41", true),
            ("%", false),
            ("h%4", false),
            ("h%zz", false),
        ] {
            let checked = check_host(Version::HTTP_11, None, &hosts(&[host]));
            assert_eq!(checked.is_ok(), fine, "{host}: {checked:?}");
        }
    }

    #[test]
    fn a_host_that_is_not_host_and_port_is_refused() {
        for host in [
            "",
            "a b",
            "user@catalog",
            "catalog:port",
            "catalog/path",
            "a:1:2",
            ":8181",
            "[::1]x",
            "[::1",
            "[]:80",
            "a?b",
            "a#b",
            "caf\u{e9}",
            "h,h2",
            "a;b",
            "h:",
            "[::1]:",
            "[zz]",
            "[:::::::::::]",
            "[fe80::1%25]",
            "[v1.]",
            "h:000080",
        ] {
            assert_eq!(
                check_host(Version::HTTP_11, None, &hosts(&[host])),
                Err(HostError::Invalid),
                "{host:?}"
            );
        }
    }

    /// The name's rule as it reads in RFC 3986, one property at a time.
    fn name_as_written(name: &[u8]) -> bool {
        !name.is_empty()
            && name.iter().all(|&b| name_byte(b) || b == b'%')
            && name.iter().enumerate().all(|(i, &b)| {
                b != b'%'
                    || name
                        .get(i + 1..i + 3)
                        .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            })
    }

    proptest::proptest! {
        /// The one-pass scan of a name and its port agrees with the rule read one property at
        /// a time, on bytes that are mostly a name's, `%`, hex digits, `:` and a few others.
        #[test]
        fn a_host_scanned_in_one_pass_is_judged_as_its_rule_reads(
            bytes in proptest::collection::vec(
                proptest::sample::select(b"aZ09.-_~%fF:: @,/\x80".to_vec()),
                0..14,
            )
        ) {
            let end = bytes.iter().position(|&b| b == b':').unwrap_or(bytes.len());
            let port_fits = match &bytes[end..] {
                [] => true,
                [b':', port @ ..] => {
                    (1..=5).contains(&port.len())
                        && port.iter().all(u8::is_ascii_digit)
                        && port.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')) <= 65535
                }
                _ => false,
            };
            let expected = name_as_written(&bytes[..end]) && port_fits;
            proptest::prop_assert_eq!(host_and_port(&bytes), expected);
        }
    }
}
