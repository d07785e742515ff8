//! The head of a 304 from an entry, built on its first use for each representation and cloned
//! for every later one: a 304 then costs one map copy, an `Age` and, unless it is a hit, its
//! marks. Built on first use rather than at fill: most entries are never revalidated by a
//! client. An entry's weight counts its heads as if built (`HEAD_WEIGHT` each), so that what
//! `cache.max_bytes` bounds does not grow after an entry is kept.

use std::sync::OnceLock;

use http::HeaderMap;

/// What one built head holds at most, counted in its entry's weight: a map's table and a few
/// fields (the kept headers, `ETag`, `x-cache`, `Cache-Status`), measured as about 100 bytes
/// each.
pub const HEAD_WEIGHT: usize = 512;

/// The 304 heads of one version's content, one per representation.
#[derive(Debug, Default)]
pub struct NotModifiedHeads {
    identity: OnceLock<HeaderMap>,
    gzip: OnceLock<HeaderMap>,
}

impl NotModifiedHeads {
    /// The head for the gzip representation or the identity one, built by `build` the first
    /// time it is asked for (concurrent first callers may each build it; one is kept).
    pub fn get(&self, gzip: bool, build: impl FnOnce() -> HeaderMap) -> &HeaderMap {
        let slot = if gzip { &self.gzip } else { &self.identity };
        slot.get_or_init(build)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderValue, ETAG};

    fn head(tag: &'static str) -> HeaderMap {
        let mut head = HeaderMap::new();
        head.insert(ETAG, HeaderValue::from_static(tag));
        head
    }

    #[test]
    fn each_representation_is_built_once_and_then_reused() {
        let heads = NotModifiedHeads::default();
        assert_eq!(heads.get(false, || head("\"a\""))[ETAG], "\"a\"");
        assert_eq!(heads.get(false, || head("\"other\""))[ETAG], "\"a\"");
        assert_eq!(heads.get(true, || head("\"a-gzip\""))[ETAG], "\"a-gzip\"");
    }
}
