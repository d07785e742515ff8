//! What a connection's last load derived from its head: the policy, the caller and the key.
//!
//! A client on a kept-alive connection asks for the same table again and again with the same
//! head, and deriving the rest (the route, the `Host` check, the caller's scope, the key) costs
//! more than the rest of a hit. That derivation is a function of the head and of what the
//! process holds: the settings in force and the namespace separator. So the last derivation
//! is kept beside a copy of the head it came from, and used again only for a head equal to it
//! in everything (method, version, target, every field in order, no body) under the same
//! settings and separator. Anything else derives afresh. A connection whose loads never repeat
//! their head (a tracing id per request) pauses comparing and copying heads for a while after
//! a few tries. What the key's last lookup found is kept beside it (a `Sight`), so the next
//! lookup need not hash the key while the store has not changed.

use std::cell::Cell;
use std::sync::Arc;

use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Version};

use crate::cache::Asking;
use crate::catalog::route::Operation;
use crate::config::Settings;

/// Kept heads in a row that no request sent again, after which a connection pauses copying.
const UNUSED_BEFORE_PAUSING: u32 = 4;

/// Load heads not copied during a pause; copying resumes after them, since a connection's
/// habits may change.
const PAUSE: u32 = 64;

/// What a load's head derived: its operation, and who asks for which key (the caller, whose
/// policy is the one in force, the key, and what the key's last lookup found).
pub struct Derived {
    pub operation: Operation,
    pub asking: Box<Asking>,
}

impl Derived {
    /// The same, holding no bytes of the request it came from (the caller's `If-None-Match`
    /// values are copied), as a memo keeps it; None if a value cannot be copied.
    pub fn detached(mut self) -> Option<Derived> {
        let caller = &mut self.asking.caller;
        caller.if_none_match = caller
            .if_none_match
            .iter()
            .map(owned)
            .collect::<Option<_>>()?;
        Some(self)
    }
}

/// A request head, as compared, and what the process held. Its values are copies: a value that
/// shared the bytes hyper read the head into would keep hyper from reusing its buffer.
pub struct Head {
    method: Method,
    version: Version,
    scheme: String,
    authority: String,
    path_and_query: String,
    fields: Vec<(HeaderName, HeaderValue)>,
    settings: Arc<Settings>,
    separator: Arc<String>,
}

impl Head {
    /// Whether `request` has this head: everything of it a derivation reads.
    fn is<B: http_body::Body>(&self, request: &Request<B>) -> bool {
        let (uri, headers) = (request.uri(), request.headers());
        request.body().is_end_stream()
            && self.method == request.method()
            && self.version == request.version()
            && self.path_and_query == uri.path_and_query().map_or("", |p| p.as_str())
            && self.authority == uri.authority().map_or("", |a| a.as_str())
            && self.scheme == uri.scheme_str().unwrap_or("")
            && self.fields.len() == headers.len()
            && self
                .fields
                .iter()
                .zip(headers)
                .all(|((name, value), (other_name, other_value))| {
                    name == other_name
                        && value.as_bytes() == other_value.as_bytes()
                        && value.is_sensitive() == other_value.is_sensitive()
                })
    }
}

/// `value`, in bytes of its own.
fn owned(value: &HeaderValue) -> Option<HeaderValue> {
    let mut copy = HeaderValue::from_bytes(value.as_bytes()).ok()?;
    copy.set_sensitive(value.is_sensitive());
    Some(copy)
}

struct Kept<T> {
    head: Head,
    /// None while lent to a request (`recall` to `restore`).
    derived: Option<T>,
}

/// One connection's memo. Requests on a connection are handed over one at a time (HTTP/2's
/// streams too: each is handed over on the connection's task), so it is a cell: whoever uses
/// it takes it, and puts it back. What is kept is lent, not copied, to the request whose head
/// recalls it, which gives it back once answered.
pub struct Memo<T> {
    kept: Cell<Option<Box<Kept<T>>>>,
    /// Whether the kept head was sent again.
    used: Cell<bool>,
    /// Kept heads in a row that were not.
    unused: Cell<u32>,
    /// Load heads left to pass without comparing or copying them.
    paused: Cell<u32>,
}

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Memo {
            kept: Cell::new(None),
            used: Cell::new(false),
            unused: Cell::new(0),
            paused: Cell::new(0),
        }
    }
}

impl<T> Memo<T> {
    /// What `request` derives, lent until `restore`, when it is the head the memo was kept for
    /// and nothing is lent already.
    pub fn recall<B: http_body::Body>(
        &self,
        request: &Request<B>,
        settings: &Arc<Settings>,
        separator: &Arc<String>,
    ) -> Option<T> {
        // During a pause what is kept was not sent again: not even compared.
        if self.paused.get() > 0 {
            return None;
        }
        let mut kept = self.kept.take()?;
        let same = Arc::ptr_eq(&kept.head.settings, settings)
            && Arc::ptr_eq(&kept.head.separator, separator)
            && kept.head.is(request);
        let derived = if same { kept.derived.take() } else { None };
        self.kept.set(Some(kept));
        if derived.is_some() {
            self.used.set(true);
            self.unused.set(0);
        }
        derived
    }

    /// Gives back what `recall` lent, for the next equal head.
    pub fn restore(&self, derived: T) {
        if let Some(mut kept) = self.kept.take() {
            kept.derived.get_or_insert(derived);
            self.kept.set(Some(kept));
        }
    }

    /// The head of a load `request` under `settings` and `separator`, for `keep`: none for a
    /// request with a body, or during a pause (after several kept heads in a row that no
    /// request sent again, such as on a connection with a tracing id per request).
    pub fn head<B: http_body::Body>(
        &self,
        request: &Request<B>,
        settings: &Arc<Settings>,
        separator: &Arc<String>,
    ) -> Option<Head> {
        if self.paused.get() > 0 {
            self.paused.set(self.paused.get() - 1);
            return None;
        }
        if !request.body().is_end_stream() {
            return None;
        }
        let uri = request.uri();
        Some(Head {
            method: request.method().clone(),
            version: request.version(),
            scheme: uri.scheme_str().unwrap_or("").to_owned(),
            authority: uri.authority().map_or("", |a| a.as_str()).to_owned(),
            path_and_query: uri.path_and_query().map_or("", |p| p.as_str()).to_owned(),
            fields: request
                .headers()
                .iter()
                .map(|(name, value)| Some((name.clone(), owned(value)?)))
                .collect::<Option<_>>()?,
            settings: settings.clone(),
            separator: separator.clone(),
        })
    }

    /// Keeps what `head` derived, in place of what was kept.
    pub fn keep(&self, head: Head, derived: T) {
        if !self.used.get() && self.kept.take().is_some() {
            self.unused.set(self.unused.get() + 1);
            if self.unused.get() >= UNUSED_BEFORE_PAUSING {
                self.unused.set(0);
                self.paused.set(PAUSE);
            }
        }
        self.used.set(false);
        self.kept.set(Some(Box::new(Kept {
            head,
            derived: Some(derived),
        })));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::Raw;
    use http::header::{ACCEPT_ENCODING, AUTHORIZATION, HOST};
    use http_body_util::{Empty, Full};

    fn settings() -> Arc<Settings> {
        let raw = Raw::of(&[("upstream", toml::Value::from("http://catalog:1"))]).unwrap();
        Arc::new(Settings::try_from(&raw).unwrap())
    }

    const PATH: &str = "/v1/p/namespaces/db/tables/t?snapshots=refs";

    fn get(path: &str, fields: &[(HeaderName, &str)]) -> Request<Empty<bytes::Bytes>> {
        let mut builder = Request::get(path);
        for (name, value) in fields {
            builder = builder.header(name, *value);
        }
        builder.body(Empty::new()).unwrap()
    }

    fn usual() -> Vec<(HeaderName, &'static str)> {
        vec![
            (HOST, "icecache:8181"),
            (AUTHORIZATION, "Bearer alice"),
            (ACCEPT_ENCODING, "gzip"),
        ]
    }

    /// What `memo` recalls for `request`, given back at once as a load answered at once does.
    fn recalled<B: http_body::Body>(
        memo: &Memo<u32>,
        request: &Request<B>,
        settings: &Arc<Settings>,
        separator: &Arc<String>,
    ) -> Option<u32> {
        let derived = memo.recall(request, settings, separator);
        if let Some(derived) = derived {
            memo.restore(derived);
        }
        derived
    }

    /// A memo kept for the usual request, with what the process holds.
    fn kept() -> (Memo<u32>, Arc<Settings>, Arc<String>) {
        let (settings, separator) = (settings(), Arc::new("%1F".to_owned()));
        let memo = Memo::default();
        let head = memo
            .head(&get(PATH, &usual()), &settings, &separator)
            .unwrap();
        memo.keep(head, 7);
        (memo, settings, separator)
    }

    #[test]
    fn nothing_is_recalled_before_something_is_kept() {
        let memo = Memo::<u32>::default();
        let request = get(PATH, &usual());
        assert_eq!(
            recalled(&memo, &request, &settings(), &Arc::new("%1F".into())),
            None
        );
    }

    #[test]
    fn the_same_head_under_the_same_settings_recalls_what_it_derived() {
        let (memo, settings, separator) = kept();
        for _ in 0..3 {
            assert_eq!(
                recalled(&memo, &get(PATH, &usual()), &settings, &separator),
                Some(7)
            );
        }
    }

    #[test]
    fn what_is_lent_is_not_recalled_again_until_it_is_given_back() {
        let (memo, settings, separator) = kept();
        let request = get(PATH, &usual());
        assert_eq!(memo.recall(&request, &settings, &separator), Some(7));
        assert_eq!(memo.recall(&request, &settings, &separator), None);
        memo.restore(7);
        assert_eq!(memo.recall(&request, &settings, &separator), Some(7));
    }

    #[test]
    fn what_is_given_back_after_another_head_was_kept_is_dropped() {
        let (memo, settings, separator) = kept();
        let lent = memo.recall(&get(PATH, &usual()), &settings, &separator);
        let other = traced(1);
        memo.keep(memo.head(&other, &settings, &separator).unwrap(), 8);
        memo.restore(lent.unwrap());
        assert_eq!(recalled(&memo, &other, &settings, &separator), Some(8));
        assert_eq!(
            recalled(&memo, &get(PATH, &usual()), &settings, &separator),
            None
        );
    }

    #[test]
    fn a_head_that_differs_in_anything_recalls_nothing() {
        let (memo, settings, separator) = kept();
        let mut other_value = usual();
        other_value[1].1 = "Bearer bob";
        let mut one_more = usual();
        one_more.push((HeaderName::from_static("x-trace"), "1"));
        let mut one_less = usual();
        one_less.pop();
        let mut reordered = usual();
        reordered.swap(1, 2);
        let mut repeated = usual();
        repeated.push((AUTHORIZATION, "Bearer alice"));
        let mut cased = usual();
        cased[1].1 = "bearer alice";
        let differing = [
            get(PATH, &other_value),
            get(PATH, &one_more),
            get(PATH, &one_less),
            get(PATH, &reordered),
            get(PATH, &repeated),
            get(PATH, &cased),
            get("/v1/p/namespaces/db/tables/t?snapshots=all", &usual()),
            get("/v1/p/namespaces/db/tables/T?snapshots=refs", &usual()),
            get("/v1/p/namespaces/db/tables/t", &usual()),
            get(
                "http://icecache:8181/v1/p/namespaces/db/tables/t?snapshots=refs",
                &usual(),
            ),
        ];
        for request in &differing {
            assert_eq!(
                recalled(&memo, request, &settings, &separator),
                None,
                "{request:?}"
            );
            // What was kept stays: the usual head still recalls it.
            assert_eq!(
                recalled(&memo, &get(PATH, &usual()), &settings, &separator),
                Some(7)
            );
        }
        let mut head = get(PATH, &usual());
        *head.method_mut() = Method::HEAD;
        assert_eq!(recalled(&memo, &head, &settings, &separator), None);
        let mut old = get(PATH, &usual());
        *old.version_mut() = Version::HTTP_10;
        assert_eq!(recalled(&memo, &old, &settings, &separator), None);
        let mut marked = get(PATH, &usual());
        marked
            .headers_mut()
            .get_mut(AUTHORIZATION)
            .unwrap()
            .set_sensitive(true);
        assert_eq!(recalled(&memo, &marked, &settings, &separator), None);
    }

    #[test]
    fn a_request_with_a_body_is_never_kept_nor_recalled() {
        let (memo, settings, separator) = kept();
        let mut with_body = Request::get(PATH)
            .body(Full::new(bytes::Bytes::from_static(b"x")))
            .unwrap();
        *with_body.headers_mut() = get(PATH, &usual()).headers().clone();
        assert_eq!(recalled(&memo, &with_body, &settings, &separator), None);
        assert!(memo.head(&with_body, &settings, &separator).is_none());
    }

    #[test]
    fn new_settings_or_a_new_separator_recall_nothing() {
        let (memo, settings, separator) = kept();
        let request = get(PATH, &usual());
        // Equal in content, but not the settings in force when the memo was kept.
        assert_eq!(
            recalled(&memo, &request, &self::settings(), &separator),
            None
        );
        assert_eq!(
            recalled(&memo, &request, &settings, &Arc::new("%1F".into())),
            None
        );
        assert_eq!(recalled(&memo, &request, &settings, &separator), Some(7));
    }

    /// The usual request with a tracing field of its own.
    fn traced(n: u32) -> Request<Empty<bytes::Bytes>> {
        let trace = n.to_string();
        let mut fields = usual();
        fields.push((HeaderName::from_static("x-trace"), trace.as_str()));
        get(PATH, &fields)
    }

    #[test]
    fn a_connection_whose_heads_never_repeat_pauses_copying_them_then_tries_again() {
        let (settings, separator) = (settings(), Arc::new("%1F".to_owned()));
        let memo = Memo::<u32>::default();
        let mut n = 0;
        let mut copied = || {
            n += 1;
            let request = traced(n);
            assert_eq!(recalled(&memo, &request, &settings, &separator), None);
            let head = memo.head(&request, &settings, &separator);
            let copied = head.is_some();
            if let Some(head) = head {
                memo.keep(head, n);
            }
            copied
        };
        // The first head and the ones after it are kept; four of them in a row unused pause it.
        for _ in 0..=UNUSED_BEFORE_PAUSING {
            assert!(copied());
        }
        for _ in 0..PAUSE {
            assert!(!copied());
        }
        assert!(copied());
    }

    #[test]
    fn during_a_pause_not_even_the_last_kept_head_is_recalled() {
        let (settings, separator) = (settings(), Arc::new("%1F".to_owned()));
        let memo = Memo::<u32>::default();
        for n in 0..=UNUSED_BEFORE_PAUSING {
            let head = memo.head(&traced(n), &settings, &separator).unwrap();
            memo.keep(head, n);
        }
        let last = traced(UNUSED_BEFORE_PAUSING);
        for _ in 0..PAUSE {
            assert_eq!(recalled(&memo, &last, &settings, &separator), None);
            assert!(memo.head(&last, &settings, &separator).is_none());
        }
        assert_eq!(
            recalled(&memo, &last, &settings, &separator),
            Some(UNUSED_BEFORE_PAUSING)
        );
    }

    #[test]
    fn requests_that_are_not_loads_do_not_pause_it() {
        let (memo, settings, separator) = kept();
        for n in 0..10 * UNUSED_BEFORE_PAUSING {
            let request = traced(n);
            assert_eq!(recalled(&memo, &request, &settings, &separator), None);
        }
        assert!(memo.head(&traced(0), &settings, &separator).is_some());
        assert_eq!(
            recalled(&memo, &get(PATH, &usual()), &settings, &separator),
            Some(7)
        );
    }

    #[test]
    fn a_kept_head_sent_again_keeps_copying_going() {
        let (settings, separator) = (settings(), Arc::new("%1F".to_owned()));
        let memo = Memo::<u32>::default();
        // Two tables taking turns, each asked twice: every kept head is used once.
        for round in 0..4 * UNUSED_BEFORE_PAUSING {
            let request = traced(round);
            for _ in 0..2 {
                if recalled(&memo, &request, &settings, &separator).is_none() {
                    let head = memo.head(&request, &settings, &separator);
                    memo.keep(head.expect("copying never pauses"), round);
                }
            }
        }
    }

    #[test]
    fn a_kept_head_holds_no_bytes_of_the_request() {
        let request = get(PATH, &usual());
        let memo = Memo::<u32>::default();
        let head = memo
            .head(&request, &settings(), &Arc::new("%1F".into()))
            .unwrap();
        for ((_, kept), (_, read)) in head.fields.iter().zip(request.headers()) {
            assert_eq!(kept.as_bytes(), read.as_bytes());
            assert_ne!(kept.as_bytes().as_ptr(), read.as_bytes().as_ptr());
        }
    }
}
