use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use tokio::time::Instant;

use super::*;
use crate::policy::identity::{IdentityHasher, Scope};

const HOLD: Duration = Duration::from_secs(60);
const KEEP: Duration = Duration::from_secs(1800);

fn caller(token: &str) -> Scope {
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
    headers.insert(http::header::AUTHORIZATION, value);
    IdentityHasher::fixed().scope(&headers)
}

fn id(token: &str, key: &str) -> ReplayId {
    ReplayId::new(caller(token), key.to_owned())
}

fn commit(body: &str) -> Fingerprint {
    Fingerprint::of(&Method::POST, "/v1/ns/tables/t", body.as_bytes())
}

fn answer(status: u16, body: &str) -> Arc<Kept> {
    Arc::new(Kept {
        status: StatusCode::from_u16(status).unwrap(),
        headers: HeaderMap::new(),
        body: Bytes::from(body.to_owned()),
    })
}

fn key_header(values: &[&str]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for value in values {
        headers.append(HEADER, HeaderValue::from_str(value).unwrap());
    }
    headers
}

#[test]
fn nothing_held_is_won() {
    assert_eq!(judge(None, &commit("a")), Claim::Won);
}

#[test]
fn the_same_request_in_flight_is_told_to_wait() {
    let held = Record::InFlight(Ticket::new(commit("a")));
    assert_eq!(judge(Some(&held), &commit("a")), Claim::InFlight);
}

#[test]
fn the_same_request_answered_is_replayed() {
    let kept = answer(200, "{}");
    let held = Record::Final(commit("a"), kept.clone());
    assert_eq!(judge(Some(&held), &commit("a")), Claim::Replay(kept));
}

#[test]
fn another_request_under_a_held_or_answered_key_is_refused_as_reused() {
    let in_flight = Record::InFlight(Ticket::new(commit("a")));
    let answered = Record::Final(commit("a"), answer(200, "{}"));
    for held in [in_flight, answered] {
        assert_eq!(judge(Some(&held), &commit("b")), Claim::Reused);
    }
}

#[test]
fn a_fingerprint_names_method_path_and_body_apart() {
    let path = "/v1/ns/tables/t";
    let base = Fingerprint::of(&Method::POST, path, b"{}");
    assert_ne!(base, Fingerprint::of(&Method::DELETE, path, b"{}"));
    assert_ne!(
        base,
        Fingerprint::of(&Method::POST, "/v1/ns/tables/u", b"{}")
    );
    assert_ne!(
        base,
        Fingerprint::of(&Method::POST, "/v1/ns/tables/t?x=1", b"{}")
    );
    assert_ne!(base, Fingerprint::of(&Method::POST, path, b"{ }"));
    // Lengths are part of it: moving bytes from the path to the body is another request.
    assert_ne!(
        Fingerprint::of(&Method::POST, "/ab", b"c"),
        Fingerprint::of(&Method::POST, "/a", b"bc")
    );
}

#[test]
fn success_and_deterministic_client_errors_are_final() {
    for status in [200, 204, 400, 403, 404, 409, 422] {
        assert!(finalises(StatusCode::from_u16(status).unwrap()), "{status}");
    }
}

#[test]
fn answers_a_retry_may_not_repeat_are_not_final() {
    for status in [401, 407, 408, 425, 429, 500, 502, 503, 504, 301] {
        assert!(
            !finalises(StatusCode::from_u16(status).unwrap()),
            "{status}"
        );
    }
}

#[test]
fn a_request_without_a_key_has_none() {
    assert_eq!(read_key(&HeaderMap::new()), Ok(None));
}

#[test]
fn a_uuid_key_is_read_as_sent() {
    let key = "0190b8a2-7c3d-7e1f-8a4b-2c6d8e0f1a2b";
    assert_eq!(read_key(&key_header(&[key])), Ok(Some(key.to_owned())));
}

#[test]
fn two_keys_on_one_request_are_refused() {
    assert_eq!(read_key(&key_header(&["a", "b"])), Err(BadKey::Repeated));
    assert_eq!(read_key(&key_header(&["a", "a"])), Err(BadKey::Repeated));
}

#[test]
fn an_empty_long_spaced_or_non_ascii_key_is_refused() {
    let long = "k".repeat(256);
    for bad in ["", " ", "a b", long.as_str()] {
        assert_eq!(
            read_key(&key_header(&[bad])),
            Err(BadKey::Malformed),
            "{bad:?}"
        );
    }
    let mut headers = HeaderMap::new();
    headers.insert(HEADER, HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
    assert_eq!(read_key(&headers), Err(BadKey::Malformed));
    assert!(read_key(&key_header(&[&"k".repeat(255)])).is_ok());
}

#[test]
fn lifetimes_are_written_in_iso_8601() {
    assert_eq!(iso_duration(Duration::from_secs(1800)), "PT30M");
    assert_eq!(iso_duration(Duration::from_secs(86400)), "PT24H");
    assert_eq!(iso_duration(Duration::from_secs(90)), "PT90S");
    assert_eq!(iso_duration(Duration::from_secs(3660)), "PT61M");
}

#[tokio::test(start_paused = true)]
async fn a_held_key_is_in_flight_until_finished_then_replayed() {
    let store = LocalReplays::new();
    let (key, ticket) = (id("alice", "k"), Ticket::new(commit("a")));
    let now = Instant::now();
    assert_eq!(store.claim_now(&key, ticket, HOLD, now), Claim::Won);
    let again = Ticket::new(commit("a"));
    assert_eq!(store.claim_now(&key, again, HOLD, now), Claim::InFlight);
    let kept = answer(200, r#"{"metadata":{}}"#);
    store.finish_now(&key, ticket, kept.clone(), KEEP);
    assert_eq!(
        store.claim_now(&key, again, HOLD, Instant::now()),
        Claim::Replay(kept)
    );
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_key_can_be_claimed_again() {
    let store = LocalReplays::new();
    let (key, ticket) = (id("alice", "k"), Ticket::new(commit("a")));
    assert_eq!(
        store.claim_now(&key, ticket, HOLD, Instant::now()),
        Claim::Won
    );
    store.abandon_now(&key, ticket);
    let retry = Ticket::new(commit("a"));
    assert_eq!(
        store.claim_now(&key, retry, HOLD, Instant::now()),
        Claim::Won
    );
}

#[tokio::test(start_paused = true)]
async fn one_callers_key_is_not_anothers() {
    let store = LocalReplays::new();
    let ticket = Ticket::new(commit("a"));
    store.claim_now(&id("alice", "k"), ticket, HOLD, Instant::now());
    store.finish_now(&id("alice", "k"), ticket, answer(200, "{}"), KEEP);
    let bob = Ticket::new(commit("a"));
    assert_eq!(
        store.claim_now(&id("bob", "k"), bob, HOLD, Instant::now()),
        Claim::Won
    );
}

#[tokio::test(start_paused = true)]
async fn a_hold_expires_and_its_late_finish_or_abandon_changes_nothing() {
    let store = LocalReplays::new();
    let key = id("alice", "k");
    let first = Ticket::new(commit("a"));
    assert_eq!(
        store.claim_now(&key, first, HOLD, Instant::now()),
        Claim::Won
    );
    tokio::time::advance(HOLD + Duration::from_secs(1)).await;
    let second = Ticket::new(commit("a"));
    assert_eq!(
        store.claim_now(&key, second, HOLD, Instant::now()),
        Claim::Won
    );
    // The first request's hold is gone: it neither finishes nor frees the second's.
    store.finish_now(&key, first, answer(200, "late"), KEEP);
    store.abandon_now(&key, first);
    let third = Ticket::new(commit("a"));
    assert_eq!(
        store.claim_now(&key, third, HOLD, Instant::now()),
        Claim::InFlight
    );
}

#[tokio::test(start_paused = true)]
async fn a_final_answer_is_kept_for_its_lifetime_only() {
    let store = LocalReplays::new();
    let key = id("alice", "k");
    let ticket = Ticket::new(commit("a"));
    store.claim_now(&key, ticket, HOLD, Instant::now());
    store.finish_now(&key, ticket, answer(200, "{}"), KEEP);
    tokio::time::advance(KEEP - Duration::from_secs(1)).await;
    let retry = Ticket::new(commit("a"));
    assert!(matches!(
        store.claim_now(&key, retry, HOLD, Instant::now()),
        Claim::Replay(_)
    ));
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(
        store.claim_now(&key, retry, HOLD, Instant::now()),
        Claim::Won
    );
}

#[tokio::test(start_paused = true)]
async fn past_the_byte_bound_the_oldest_answers_go_first() {
    let store = LocalReplays::new();
    let body = "x".repeat(1 << 20);
    let count = local::MAX_KEPT_BYTES / body.len() + 8;
    for n in 0..count {
        let key = id("alice", &format!("k{n}"));
        let ticket = Ticket::new(commit("a"));
        store.claim_now(&key, ticket, HOLD, Instant::now());
        store.finish_now(&key, ticket, answer(200, &body), KEEP);
    }
    assert!(store.kept_bytes() <= local::MAX_KEPT_BYTES);
    let retry = Ticket::new(commit("a"));
    let oldest = store.claim_now(&id("alice", "k0"), retry, HOLD, Instant::now());
    assert_eq!(oldest, Claim::Won);
    let newest = id("alice", &format!("k{}", count - 1));
    assert!(matches!(
        store.claim_now(&newest, retry, HOLD, Instant::now()),
        Claim::Replay(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_hold_dropped_before_its_answer_gives_the_key_back() {
    let store: Arc<dyn ReplayStore> = Arc::new(LocalReplays::new());
    let key = id("alice", "k");
    let ticket = Ticket::new(commit("a"));
    assert_eq!(store.claim(&key, ticket, HOLD).await, Ok(Claim::Won));
    drop(Held::new(store.clone(), key.clone(), ticket, KEEP));
    tokio::task::yield_now().await;
    let retry = Ticket::new(commit("a"));
    assert_eq!(store.claim(&key, retry, HOLD).await, Ok(Claim::Won));
}

#[tokio::test(start_paused = true)]
async fn a_hold_settled_with_a_server_error_keeps_nothing() {
    let store: Arc<dyn ReplayStore> = Arc::new(LocalReplays::new());
    let key = id("alice", "k");
    let ticket = Ticket::new(commit("a"));
    store.claim(&key, ticket, HOLD).await.unwrap();
    let held = Held::new(store.clone(), key.clone(), ticket, KEEP);
    held.settle((*answer(503, "busy")).clone(), 1 << 20).await;
    let retry = Ticket::new(commit("a"));
    assert_eq!(store.claim(&key, retry, HOLD).await, Ok(Claim::Won));
}

#[tokio::test(start_paused = true)]
async fn a_hold_settled_with_an_answer_too_large_keeps_nothing() {
    let store: Arc<dyn ReplayStore> = Arc::new(LocalReplays::new());
    let key = id("alice", "k");
    let ticket = Ticket::new(commit("a"));
    store.claim(&key, ticket, HOLD).await.unwrap();
    let held = Held::new(store.clone(), key.clone(), ticket, KEEP);
    held.settle((*answer(200, "0123456789")).clone(), 9).await;
    let retry = Ticket::new(commit("a"));
    assert_eq!(store.claim(&key, retry, HOLD).await, Ok(Claim::Won));
}

#[tokio::test(start_paused = true)]
async fn a_hold_settled_with_a_final_answer_is_replayed() {
    let store: Arc<dyn ReplayStore> = Arc::new(LocalReplays::new());
    let key = id("alice", "k");
    let ticket = Ticket::new(commit("a"));
    store.claim(&key, ticket, HOLD).await.unwrap();
    let held = Held::new(store.clone(), key.clone(), ticket, KEEP);
    let kept = answer(404, r#"{"error":{}}"#);
    held.settle((*kept).clone(), 1 << 20).await;
    let retry = Ticket::new(commit("a"));
    assert_eq!(
        store.claim(&key, retry, HOLD).await,
        Ok(Claim::Replay(kept))
    );
}
