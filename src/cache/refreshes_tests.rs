use super::*;
use http::HeaderValue;

const NOW_MS: u64 = 1_800_000_000_000;
const FRESH_FOR: Duration = Duration::from_secs(3600);
const MAX_BYTES: u64 = 1 << 20;

fn secret() -> KeyPatterns {
    KeyPatterns::default()
}

fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Refreshed {
    let mut map = HeaderMap::new();
    map.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in headers {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    Refreshed {
        status: StatusCode::from_u16(status).unwrap(),
        headers: map,
        body: Bytes::from(body.to_owned()),
    }
}

fn vending(expiries_ms: &[u64]) -> String {
    let entries: Vec<String> = expiries_ms
        .iter()
        .map(|expiry| {
            format!(
                r#"{{"prefix":"s3://b/{expiry}","config":{{"s3.access-key-id":"AK",
                "s3.secret-access-key":"SK","s3.session-token-expires-at-ms":"{expiry}"}}}}"#
            )
        })
        .collect();
    format!(r#"{{"storage-credentials":[{}]}}"#, entries.join(","))
}

fn judged(refreshed: &Refreshed) -> Judgement {
    judge(
        refreshed,
        NOW_MS,
        FRESH_FOR,
        MAX_BYTES,
        |n| n == "authorization",
        &secret(),
    )
}

#[test]
fn an_answer_is_kept_for_half_of_what_is_left_of_its_earliest_credential() {
    let body = vending(&[NOW_MS + 600_000, NOW_MS + 200_000]);
    assert_eq!(
        judged(&answer(200, &[], &body)),
        Ok(Some(Duration::from_secs(100)))
    );
}

#[test]
fn an_answer_is_never_kept_longer_than_fresh_for() {
    let body = vending(&[NOW_MS + 10 * 3_600_000]);
    assert_eq!(judged(&answer(200, &[], &body)), Ok(Some(FRESH_FOR)));
}

#[test]
fn an_expired_or_unreadable_expiry_is_shared_with_waiters_but_never_kept() {
    for expiry in [NOW_MS, NOW_MS - 1, 0] {
        let body = vending(&[expiry]);
        assert_eq!(judged(&answer(200, &[], &body)), Ok(None), "{expiry}");
    }
    let body = r#"{"storage-credentials":[{"prefix":"s3://b","config":
        {"s3.secret-access-key":"SK","s3.session-token-expires-at-ms":"soon"}}]}"#;
    assert_eq!(judged(&answer(200, &[], body)), Ok(None));
}

#[test]
fn credentials_that_state_no_expiry_are_never_kept() {
    let body =
        r#"{"storage-credentials":[{"prefix":"s3://b","config":{"s3.secret-access-key":"SK"}}]}"#;
    assert_eq!(judged(&answer(200, &[], body)), Ok(None));
}

type Headers = &'static [(&'static str, &'static str)];

#[test]
fn only_a_plain_json_200_is_shared() {
    let body = vending(&[NOW_MS + 600_000]);
    let cases: [(u16, Headers, NoCacheReason); 7] = [
        (404, &[], NoCacheReason::NotOk),
        (203, &[], NoCacheReason::NotOk),
        (
            200,
            &[("cache-control", "no-store")],
            NoCacheReason::NoStore,
        ),
        (
            200,
            &[("cache-control", "private, No-Cache")],
            NoCacheReason::NoStore,
        ),
        (
            200,
            &[("vary", "Authorization, X-Tenant")],
            NoCacheReason::Vary,
        ),
        (200, &[("vary", "*")], NoCacheReason::Vary),
        (
            200,
            &[("content-encoding", "gzip")],
            NoCacheReason::NotLoadTableResult,
        ),
    ];
    for (status, headers, reason) in cases {
        assert_eq!(
            judged(&answer(status, headers, &body)),
            Err(reason),
            "{status} {headers:?}"
        );
    }
    assert_eq!(
        judged(&answer(200, &[("vary", "Authorization")], &body)),
        Ok(Some(Duration::from_secs(300))),
        "the key holds the caller's credentials"
    );
}

#[test]
fn a_body_that_is_not_json_the_walker_reads_whole_is_not_shared() {
    let mut html = answer(200, &[], "<html>busy</html>");
    assert_eq!(judged(&html), Err(NoCacheReason::NotLoadTableResult));
    html.headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
    assert_eq!(judged(&html), Err(NoCacheReason::NotLoadTableResult));
}

#[test]
fn an_answer_larger_than_an_entry_may_be_is_not_shared() {
    let body = vending(&[NOW_MS + 600_000]);
    let refreshed = answer(200, &[], &body);
    let small = judge(&refreshed, NOW_MS, FRESH_FOR, 16, |_| false, &secret());
    assert_eq!(small, Err(NoCacheReason::TooLarge));
}

fn key(scope: u8, plan: Option<&str>) -> RefreshKey {
    let scope = crate::policy::identity::IdentityHasher::fixed().scope(&{
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from(u16::from(scope)));
        headers
    });
    let query = plan.map(|p| format!("planId={p}"));
    RefreshKey::new(
        scope,
        "/v1/namespaces/db/tables/t/credentials",
        query.as_deref(),
        None,
    )
    .unwrap()
}

fn lead(refreshes: &Refreshes, key: RefreshKey, now: Instant) -> Leader {
    match refreshes.step(key, now) {
        Step::Lead(leader) => leader,
        _ => panic!("expected to lead"),
    }
}

fn kept(refreshed: Refreshed) -> (Arc<Refreshed>, Judgement) {
    (Arc::new(refreshed), Ok(Some(Duration::from_secs(60))))
}

/// One refresh of caller 1 led and finished with an answer kept for a minute.
fn keep_one(refreshes: &Refreshes, now: Instant) {
    let leader = lead(refreshes, key(1, None), now);
    let (answer, judged) = kept(answer(200, &[], "{}"));
    refreshes.finish(leader, answer, judged, now);
}

/// A refresh of caller 1 led, and another of the same joined to it.
fn lead_and_wait(refreshes: &Refreshes, now: Instant) -> (Leader, Waiter<Outcome>) {
    let leader = lead(refreshes, key(1, None), now);
    let Step::Wait(waiter) = refreshes.step(key(1, None), now) else {
        panic!("expected to wait");
    };
    (leader, waiter)
}

#[test]
fn the_query_keys_one_plan_id_and_nothing_else() {
    let scope = Scope::SHARED;
    let path = "/v1/ns/tables/t/credentials";
    assert!(RefreshKey::new(scope, path, Some("planId=p%201"), None).is_ok());
    assert_ne!(
        RefreshKey::new(scope, path, Some("planId=a"), None),
        RefreshKey::new(scope, path, Some("planId=b"), None)
    );
    for (query, reason) in [
        ("planId=a&planId=b", NoCacheReason::AmbiguousQuery),
        ("planId=a;x=1", NoCacheReason::AmbiguousQuery),
        ("planId=%zz", NoCacheReason::AmbiguousQuery),
        ("planid=a", NoCacheReason::UnknownParameter),
        ("planId=a&snapshots=all", NoCacheReason::UnknownParameter),
    ] {
        assert_eq!(
            RefreshKey::new(scope, path, Some(query), None),
            Err(reason),
            "{query}"
        );
    }
}

#[tokio::test]
async fn callers_waiting_on_a_refresh_get_its_answer_and_the_next_is_answered_from_memory() {
    let refreshes = Refreshes::default();
    let now = Instant::now();
    let (leader, waiter) = lead_and_wait(&refreshes, now);
    let (answer, judged) = kept(answer(200, &[], "{}"));
    refreshes.finish(leader, answer.clone(), judged, now);
    match waiter.wait().await.as_deref() {
        Ok(Outcome::Shared(shared)) => assert!(Arc::ptr_eq(shared, &answer)),
        other => panic!("expected the leader's answer, got {other:?}"),
    }
    assert!(matches!(refreshes.step(key(1, None), now), Step::Kept(_)));
}

#[tokio::test]
async fn another_caller_or_another_plan_never_joins_nor_gets_what_is_kept() {
    let refreshes = Refreshes::default();
    let now = Instant::now();
    let _leader = lead(&refreshes, key(1, None), now);
    let _other = lead(&refreshes, key(2, None), now);
    let _plan = lead(&refreshes, key(1, Some("p")), now);
    let refreshes = Refreshes::default();
    keep_one(&refreshes, now);
    assert!(matches!(refreshes.step(key(2, None), now), Step::Lead(_)));
    assert!(matches!(
        refreshes.step(key(1, Some("p")), now),
        Step::Lead(_)
    ));
}

#[tokio::test]
async fn a_kept_answer_is_asked_again_once_its_time_is_up() {
    let refreshes = Refreshes::default();
    let now = Instant::now();
    keep_one(&refreshes, now);
    let later = now + Duration::from_secs(60);
    assert!(matches!(refreshes.step(key(1, None), later), Step::Lead(_)));
}

#[tokio::test]
async fn an_answer_its_own_caller_keeps_sends_the_waiters_to_the_catalog() {
    let refreshes = Refreshes::default();
    let now = Instant::now();
    let (leader, waiter) = lead_and_wait(&refreshes, now);
    let refused = Arc::new(answer(503, &[], "{}"));
    refreshes.finish(leader, refused, Err(NoCacheReason::NotOk), now);
    assert!(matches!(
        waiter.wait().await.as_deref(),
        Ok(Outcome::Own(NoCacheReason::NotOk))
    ));
    assert!(matches!(refreshes.step(key(1, None), now), Step::Lead(_)));
}

#[tokio::test]
async fn a_refresh_begun_before_an_invalidation_is_neither_joined_nor_kept_after_it() {
    let refreshes = Refreshes::default();
    let now = Instant::now();
    let before = lead(&refreshes, key(1, None), now);
    refreshes.forget_all();
    let after = lead(&refreshes, key(1, None), now);
    let (answer, judged) = kept(answer(200, &[], "{}"));
    refreshes.finish(before, answer, judged, now);
    assert!(
        matches!(refreshes.step(key(1, None), now), Step::Wait(_)),
        "the refresh begun after the invalidation is the one joined; nothing is kept"
    );
    drop(after);
}

#[tokio::test]
async fn an_invalidation_forgets_every_kept_answer() {
    let refreshes = Refreshes::default();
    let now = Instant::now();
    keep_one(&refreshes, now);
    refreshes.forget_all();
    assert!(matches!(refreshes.step(key(1, None), now), Step::Lead(_)));
}

#[tokio::test]
async fn a_leader_that_gives_up_sends_its_waiters_to_ask_again() {
    let refreshes = Refreshes::default();
    let now = Instant::now();
    let (leader, waiter) = lead_and_wait(&refreshes, now);
    drop(leader);
    assert!(waiter.wait().await.is_err());
    assert!(matches!(refreshes.step(key(1, None), now), Step::Lead(_)));
}
