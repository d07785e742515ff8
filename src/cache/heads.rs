//! The heads of an entry's answers, built on their first use for each representation and
//! copied for every later one: an answer from an entry then costs a copy of its few fields, an
//! `Age` and, unless it is a hit, its marks. Built on first use rather than at fill: most
//! entries are never revalidated by a client, and many are read in one representation only. An
//! entry's weight counts its heads as if built (in both forms), so that what `cache.max_bytes`
//! bounds does not grow after an entry is kept. A head depends on the policy it is served under
//! (a packed head holds apart what the policy strips), so it is kept with that policy's
//! generation, and used for that policy only.

use std::borrow::Cow;
use std::sync::OnceLock;

use http::HeaderMap;

/// What one built 304 head holds at most, counted in its entry's weight: a map's table and a
/// few fields (the kept headers, `ETag`, `x-cache`, `Cache-Status`, `Age`), measured as about
/// 100 bytes each. A 200 head weighs this beside a copy of the entry's own headers.
pub const HEAD_WEIGHT: usize = 512;

/// How a head holds icecache's marks (`x-cache`, `Cache-Status`) and `ETag`: as fields of their
/// own (HTTP/2, and whatever reads or edits the answer's fields before it is sent), or packed
/// into one field's value in the spelling they are written in (`wire::packed`), for an HTTP/1.x
/// client's answer that goes out as it is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadForm {
    Fields,
    Packed,
}

impl HeadForm {
    /// The form an answer to a request of `version` can be written in: packed for HTTP/1.x,
    /// whose encoder writes a value as it is.
    pub fn for_version(version: http::Version) -> HeadForm {
        if version <= http::Version::HTTP_11 {
            HeadForm::Packed
        } else {
            HeadForm::Fields
        }
    }
}

/// How many forms an entry may keep heads in, for its weight.
pub const FORMS: usize = 2;

/// The heads of one version's answers: a 304 and a 200 per representation and form.
#[derive(Debug, Default)]
pub struct Heads {
    not_modified: [[OnceLock<Built>; 2]; FORMS],
    full: [[OnceLock<Built>; 2]; FORMS],
}

/// A head, and the generation of the policy it was built under.
#[derive(Debug)]
struct Built {
    policy: u64,
    head: HeaderMap,
}

impl Heads {
    /// The 304 head in `form` for the gzip representation or the identity one, under the policy
    /// of generation `policy`: built by `build` the first time it is asked for (concurrent
    /// first callers may each build it; one is kept), and again, not kept, under another policy.
    pub fn not_modified(
        &self,
        form: HeadForm,
        gzip: bool,
        policy: u64,
        build: impl Fn() -> HeaderMap,
    ) -> Cow<'_, HeaderMap> {
        kept(
            &self.not_modified[form as usize][usize::from(gzip)],
            policy,
            build,
        )
    }

    /// The 200 head in `form` for the gzip representation or the identity one, likewise.
    pub fn full(
        &self,
        form: HeadForm,
        gzip: bool,
        policy: u64,
        build: impl Fn() -> HeaderMap,
    ) -> Cow<'_, HeaderMap> {
        kept(&self.full[form as usize][usize::from(gzip)], policy, build)
    }
}

fn kept(cell: &OnceLock<Built>, policy: u64, build: impl Fn() -> HeaderMap) -> Cow<'_, HeaderMap> {
    let built = cell.get_or_init(|| Built {
        policy,
        head: build(),
    });
    if built.policy == policy {
        Cow::Borrowed(&built.head)
    } else {
        Cow::Owned(build())
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

    use HeadForm::{Fields, Packed};

    const POLICY: u64 = 7;

    #[test]
    fn a_head_asked_for_under_another_policy_is_built_for_it_and_not_kept() {
        let heads = Heads::default();
        assert_eq!(
            heads.full(Packed, false, POLICY, || head("\"a\""))[ETAG],
            "\"a\""
        );
        let other = heads.full(Packed, false, POLICY + 1, || head("\"b\""));
        assert_eq!(other[ETAG], "\"b\"");
        assert!(matches!(other, Cow::Owned(_)));
        assert_eq!(
            heads.full(Packed, false, POLICY, || head("\"c\""))[ETAG],
            "\"a\""
        );
    }

    #[test]
    fn only_http1_answers_are_packed() {
        assert_eq!(HeadForm::for_version(http::Version::HTTP_10), Packed);
        assert_eq!(HeadForm::for_version(http::Version::HTTP_11), Packed);
        assert_eq!(HeadForm::for_version(http::Version::HTTP_2), Fields);
        assert_eq!(HeadForm::for_version(http::Version::HTTP_3), Fields);
    }

    #[test]
    fn each_representation_is_built_once_and_then_reused() {
        let heads = Heads::default();
        assert_eq!(
            heads.not_modified(Fields, false, POLICY, || head("\"a\""))[ETAG],
            "\"a\""
        );
        assert_eq!(
            heads.not_modified(Fields, false, POLICY, || head("\"other\""))[ETAG],
            "\"a\""
        );
        assert_eq!(
            heads.not_modified(Fields, true, POLICY, || head("\"a-gzip\""))[ETAG],
            "\"a-gzip\""
        );
    }

    #[test]
    fn a_200_head_is_kept_apart_from_the_304_head() {
        let heads = Heads::default();
        assert_eq!(
            heads.not_modified(Fields, false, POLICY, || head("\"a\""))[ETAG],
            "\"a\""
        );
        assert_eq!(
            heads.full(Fields, false, POLICY, || head("\"full\""))[ETAG],
            "\"full\""
        );
        assert_eq!(
            heads.full(Fields, false, POLICY, || head("\"other\""))[ETAG],
            "\"full\""
        );
        assert_eq!(
            heads.not_modified(Fields, false, POLICY, || head("\"other\""))[ETAG],
            "\"a\""
        );
    }

    #[test]
    fn each_form_is_kept_apart() {
        let heads = Heads::default();
        assert_eq!(
            heads.full(Fields, false, POLICY, || head("\"fields\""))[ETAG],
            "\"fields\""
        );
        assert_eq!(
            heads.full(Packed, false, POLICY, || head("\"packed\""))[ETAG],
            "\"packed\""
        );
        assert_eq!(
            heads.full(Fields, false, POLICY, || head("\"other\""))[ETAG],
            "\"fields\""
        );
        assert_eq!(
            heads.not_modified(Packed, true, POLICY, || head("\"p-gzip\""))[ETAG],
            "\"p-gzip\""
        );
        assert_eq!(
            heads.not_modified(Fields, true, POLICY, || head("\"f-gzip\""))[ETAG],
            "\"f-gzip\""
        );
    }
}
