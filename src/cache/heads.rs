//! The heads of an entry's answers, built on their first use for each representation and
//! cloned for every later one: an answer from an entry then costs one map copy, an `Age` (whose
//! place the head holds, so that it replaces a value instead of growing the copy) and, unless
//! it is a hit, its marks. Built on first use rather than at fill: most entries are never
//! revalidated by a client, and many are read in one representation only. An entry's weight
//! counts its heads as if built, so that what `cache.max_bytes` bounds does not grow after an
//! entry is kept.

use std::sync::OnceLock;

use http::HeaderMap;

/// What one built 304 head holds at most, counted in its entry's weight: a map's table and a
/// few fields (the kept headers, `ETag`, `x-cache`, `Cache-Status`, `Age`), measured as about
/// 100 bytes each. A 200 head weighs this beside a copy of the entry's own headers.
pub const HEAD_WEIGHT: usize = 512;

/// The heads of one version's answers: a 304 and a 200 per representation.
#[derive(Debug, Default)]
pub struct Heads {
    not_modified: [OnceLock<HeaderMap>; 2],
    full: [OnceLock<HeaderMap>; 2],
}

impl Heads {
    /// The 304 head for the gzip representation or the identity one, built by `build` the
    /// first time it is asked for (concurrent first callers may each build it; one is kept).
    pub fn not_modified(&self, gzip: bool, build: impl FnOnce() -> HeaderMap) -> &HeaderMap {
        self.not_modified[usize::from(gzip)].get_or_init(build)
    }

    /// The 200 head for the gzip representation or the identity one, built likewise.
    pub fn full(&self, gzip: bool, build: impl FnOnce() -> HeaderMap) -> &HeaderMap {
        self.full[usize::from(gzip)].get_or_init(build)
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
        let heads = Heads::default();
        assert_eq!(heads.not_modified(false, || head("\"a\""))[ETAG], "\"a\"");
        assert_eq!(
            heads.not_modified(false, || head("\"other\""))[ETAG],
            "\"a\""
        );
        assert_eq!(
            heads.not_modified(true, || head("\"a-gzip\""))[ETAG],
            "\"a-gzip\""
        );
    }

    #[test]
    fn a_200_head_is_kept_apart_from_the_304_head() {
        let heads = Heads::default();
        assert_eq!(heads.not_modified(false, || head("\"a\""))[ETAG], "\"a\"");
        assert_eq!(heads.full(false, || head("\"full\""))[ETAG], "\"full\"");
        assert_eq!(heads.full(false, || head("\"other\""))[ETAG], "\"full\"");
        assert_eq!(
            heads.not_modified(false, || head("\"other\""))[ETAG],
            "\"a\""
        );
    }
}
