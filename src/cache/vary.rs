//! The request headers an answer varies on beyond what the key holds (RFC 9111 §4.1): an
//! entry remembers the values the request that fetched it carried, and is served only to
//! requests that carry the same (rustberg, for one, answers `Vary: origin`). An answer with
//! `Vary: *` (or a `Vary` icecache cannot read) matches no other request: it is never stored
//! nor shared.

use http::header::{HeaderMap, HeaderName, HeaderValue, VARY};

use crate::wire::headers::HeaderLookup;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Varies {
    headers: Vec<(HeaderName, Vec<HeaderValue>)>,
    /// `Vary: *`: no other request matches.
    star: bool,
}

impl Varies {
    const STAR: Varies = Varies {
        headers: Vec::new(),
        star: true,
    };

    /// From an answer's `Vary` and the request that fetched it, leaving out the headers
    /// `keyed` says the key covers already.
    pub fn of(answer: &HeaderMap, request: &HeaderMap, keyed: impl Fn(&str) -> bool) -> Varies {
        let mut names: Vec<HeaderName> = Vec::new();
        for field in answer.get_all(VARY).iter() {
            let Ok(text) = field.to_str() else {
                return Varies::STAR;
            };
            for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if name == "*" {
                    return Varies::STAR;
                }
                let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
                    return Varies::STAR;
                };
                if !keyed(name.as_str()) && !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        let headers = names
            .into_iter()
            .map(|name| {
                let values = request
                    .get_all(&name)
                    .iter()
                    .filter_map(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
                    .collect();
                (name, values)
            })
            .collect();
        Varies {
            headers,
            star: false,
        }
    }

    /// The headers and values, as the tier shares them (never a `Vary: *`, which is not
    /// stored).
    pub fn to_parts(&self) -> Vec<(String, Vec<Vec<u8>>)> {
        self.headers
            .iter()
            .map(|(name, values)| {
                (
                    name.as_str().to_owned(),
                    values.iter().map(|v| v.as_bytes().to_vec()).collect(),
                )
            })
            .collect()
    }

    /// Read back from the tier; a part that is not a header makes it match nothing.
    pub fn from_parts(parts: &[(String, Vec<Vec<u8>>)]) -> Varies {
        let mut headers = Vec::with_capacity(parts.len());
        for (name, values) in parts {
            let (Ok(name), Ok(values)) = (
                HeaderName::from_bytes(name.as_bytes()),
                values
                    .iter()
                    .map(|v| HeaderValue::from_bytes(v))
                    .collect::<Result<Vec<_>, _>>(),
            ) else {
                return Varies::STAR;
            };
            headers.push((name, values));
        }
        Varies {
            headers,
            star: false,
        }
    }

    /// Whether the answer varies on no request header beyond the key.
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && !self.star
    }

    /// `Vary: *`: the answer is the fetching request's alone.
    pub fn is_star(&self) -> bool {
        self.star
    }

    /// Whether `request` carries the same values for every header the answer varies on.
    pub fn matches(&self, request: &impl HeaderLookup) -> bool {
        !self.star
            && self
                .headers
                .iter()
                .all(|(name, values)| request.values(name).iter().eq(values.iter()))
    }

    pub fn weight(&self) -> usize {
        self.headers
            .iter()
            .map(|(name, values)| {
                name.as_str().len() + values.iter().map(|v| v.len() + 32).sum::<usize>() + 32
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_static(value));
        }
        h
    }

    #[test]
    fn an_entry_is_served_only_to_requests_with_the_same_varying_headers() {
        let answer = headers(&[("vary", "Origin, accept-encoding")]);
        let fetched_by = headers(&[("origin", "https://a")]);
        let varies = Varies::of(&answer, &fetched_by, |n| n == "accept-encoding");
        assert!(varies.matches(&headers(&[
            ("origin", "https://a"),
            ("accept-encoding", "gzip")
        ])));
        assert!(!varies.matches(&headers(&[("origin", "https://b")])));
        assert!(!varies.matches(&HeaderMap::new()));
    }

    #[test]
    fn an_absent_header_matches_only_its_absence() {
        let varies = Varies::of(&headers(&[("vary", "origin")]), &HeaderMap::new(), |_| {
            false
        });
        assert!(varies.matches(&HeaderMap::new()));
        assert!(!varies.matches(&headers(&[("origin", "https://a")])));
    }

    #[test]
    fn vary_star_matches_no_request() {
        let star = Varies::of(
            &headers(&[("vary", "origin, *")]),
            &HeaderMap::new(),
            |_| false,
        );
        assert!(star.is_star());
        assert!(!star.matches(&HeaderMap::new()));
    }
}
