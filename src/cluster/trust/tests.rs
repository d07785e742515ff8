//! The trust rules, one behaviour each, under paused time.

use std::time::Duration;

use tokio::time::{advance, Instant};

use super::*;

const LEASE: Duration = Duration::from_millis(1000);
const ME: MemberId = 1;
const PEER: MemberId = 2;
const DATASET: u64 = 77;

fn at(seq: u64) -> Position {
    Position {
        dataset: DATASET,
        seq,
    }
}

fn reply(seq: u64, known: bool) -> HeartbeatReply {
    HeartbeatReply {
        position: at(seq),
        known,
        members: vec![(ME, 1), (PEER, 1)],
    }
}

/// A replica that joined at position `seq` and holds a lease renewed now.
fn joined(seq: u64) -> Trust {
    let mut trust = Trust::new(Rules::new(LEASE), ME);
    let now = Instant::now();
    assert_eq!(trust.answered(now, now, &reply(seq, false)), Renewal::Reset);
    trust
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn nothing_is_served_before_the_first_renewal() {
    let trust = Trust::new(Rules::new(LEASE), ME);
    assert_eq!(
        trust.may_serve(Instant::now(), 0),
        Verdict::AskCatalog(Distrust::NoLease)
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_runs_from_the_sending() {
    let sent = Instant::now();
    let mut trust = Trust::new(Rules::new(LEASE), ME);
    advance(ms(300)).await;
    trust.answered(sent, Instant::now(), &reply(0, false));
    let generation = trust.generation();
    assert_eq!(trust.may_serve(Instant::now(), generation), Verdict::Serve);
    let held = Rules::new(LEASE).held_for();
    advance(held - ms(300) - ms(1)).await;
    assert_eq!(trust.may_serve(Instant::now(), generation), Verdict::Serve);
    advance(ms(1)).await;
    assert_eq!(
        trust.may_serve(Instant::now(), generation),
        Verdict::AskCatalog(Distrust::NoLease)
    );
}

#[tokio::test(start_paused = true)]
async fn a_late_answer_renews_nothing() {
    let mut trust = joined(0);
    let sent = Instant::now();
    advance(LEASE * 2).await;
    assert_eq!(
        trust.answered(sent, Instant::now(), &reply(0, true)),
        Renewal::Renewed
    );
    assert_eq!(
        trust.may_serve(Instant::now(), trust.generation()),
        Verdict::AskCatalog(Distrust::NoLease)
    );
}

#[tokio::test(start_paused = true)]
async fn a_paused_replica_asks_on_waking() {
    let trust = joined(0);
    // The process was stopped with a request read just before: it is judged when it wakes.
    advance(LEASE + ms(1)).await;
    assert_eq!(
        trust.may_serve(Instant::now(), trust.generation()),
        Verdict::AskCatalog(Distrust::NoLease)
    );
}

#[tokio::test(start_paused = true)]
async fn an_entry_of_an_older_generation_is_not_served() {
    let trust = joined(0);
    assert_eq!(
        trust.may_serve(Instant::now(), trust.generation() - 1),
        Verdict::AskCatalog(Distrust::OlderGeneration)
    );
}

#[tokio::test(start_paused = true)]
async fn an_invalidation_in_order_drops_only_what_it_touched() {
    let mut trust = joined(4);
    let generation = trust.generation();
    assert_eq!(trust.invalidation(Instant::now(), at(5)), Apply::Touched);
    assert_eq!(trust.applied(), Some(at(5)));
    assert_eq!(trust.generation(), generation);
}

#[tokio::test(start_paused = true)]
async fn a_repeated_invalidation_drops_what_it_touched_again() {
    let mut trust = joined(4);
    assert_eq!(trust.invalidation(Instant::now(), at(3)), Apply::Touched);
    assert_eq!(trust.applied(), Some(at(4)));
}

#[tokio::test(start_paused = true)]
async fn a_gap_drops_everything() {
    let mut trust = joined(4);
    let generation = trust.generation();
    assert_eq!(trust.invalidation(Instant::now(), at(6)), Apply::Everything);
    assert_eq!(trust.generation(), generation + 1);
    assert_eq!(trust.applied(), Some(at(6)));
}

#[tokio::test(start_paused = true)]
async fn another_dataset_drops_everything() {
    let mut trust = joined(4);
    let generation = trust.generation();
    let elsewhere = Position {
        dataset: DATASET + 1,
        seq: 1,
    };
    assert_eq!(
        trust.invalidation(Instant::now(), elsewhere),
        Apply::Everything
    );
    assert_eq!(trust.generation(), generation + 1);
    let mut trust = joined(4);
    let reply = HeartbeatReply {
        position: elsewhere,
        known: true,
        members: vec![],
    };
    let now = Instant::now();
    assert_eq!(trust.answered(now, now, &reply), Renewal::Reset);
    assert_eq!(trust.generation(), generation + 1);
}

#[tokio::test(start_paused = true)]
async fn an_unlisted_replica_drops_everything() {
    let mut trust = joined(4);
    let generation = trust.generation();
    let now = Instant::now();
    assert_eq!(trust.answered(now, now, &reply(4, false)), Renewal::Reset);
    assert_eq!(trust.generation(), generation + 1);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_waits_for_the_invalidations_before_it() {
    let mut trust = joined(4);
    let generation = trust.generation();
    advance(LEASE / 2).await;
    let sent = Instant::now();
    assert_eq!(
        trust.answered(sent, sent, &reply(6, true)),
        Renewal::Waiting
    );
    // The old lease ran out while the invalidations were still on their way.
    advance(LEASE / 2).await;
    assert_eq!(
        trust.may_serve(Instant::now(), generation),
        Verdict::AskCatalog(Distrust::NoLease)
    );
    trust.invalidation(Instant::now(), at(5));
    assert_eq!(
        trust.may_serve(Instant::now(), generation),
        Verdict::AskCatalog(Distrust::NoLease)
    );
    trust.invalidation(Instant::now(), at(6));
    assert_eq!(trust.may_serve(Instant::now(), generation), Verdict::Serve);
}

#[tokio::test(start_paused = true)]
async fn invalidations_still_missing_at_the_next_answer_were_lost() {
    let mut trust = joined(4);
    let generation = trust.generation();
    let now = Instant::now();
    assert_eq!(trust.answered(now, now, &reply(6, true)), Renewal::Waiting);
    advance(LEASE / 4).await;
    let now = Instant::now();
    assert_eq!(trust.answered(now, now, &reply(6, true)), Renewal::Reset);
    assert_eq!(trust.generation(), generation + 1);
    assert_eq!(trust.applied(), Some(at(6)));
}

#[tokio::test(start_paused = true)]
async fn a_write_answers_when_every_member_acknowledged() {
    let mut trust = joined(0);
    advance(LEASE * 2).await;
    let now = Instant::now();
    trust.answered(now, now, &reply(0, true));
    let mut wait = trust.begin_write(now, 9, at(1), &[ME, PEER, 3]);
    assert!(!wait.may_answer(now));
    wait.acknowledged(PEER, 9);
    wait.acknowledged(3, 8);
    assert!(
        !wait.may_answer(now),
        "an acknowledgement of another write counts for nothing"
    );
    wait.acknowledged(3, 9);
    assert!(wait.may_answer(now));
}

#[tokio::test(start_paused = true)]
async fn a_silent_member_costs_one_lease() {
    let trust = joined(0);
    advance(LEASE * 2).await;
    let now = Instant::now();
    let wait = trust.begin_write(now, 9, at(1), &[ME, PEER]);
    assert_eq!(wait.deadline(), now + Rules::new(LEASE).waited_for());
    advance(Rules::new(LEASE).waited_for() - ms(1)).await;
    assert!(!wait.may_answer(Instant::now()));
    advance(ms(1)).await;
    assert!(wait.may_answer(Instant::now()));
}

#[tokio::test(start_paused = true)]
async fn a_young_dataset_waits_out_the_lease() {
    let trust = joined(0);
    let now = Instant::now();
    let mut wait = trust.begin_write(now, 9, at(1), &[ME, PEER]);
    wait.acknowledged(PEER, 9);
    assert!(
        !wait.may_answer(now),
        "a flush may have unlisted a lease still alive"
    );
    let elsewhere = Position {
        dataset: DATASET + 1,
        seq: 1,
    };
    advance(LEASE * 2).await;
    let mut wait = trust.begin_write(Instant::now(), 9, elsewhere, &[ME, PEER]);
    wait.acknowledged(PEER, 9);
    assert!(!wait.may_answer(Instant::now()));
}

#[tokio::test(start_paused = true)]
async fn a_member_is_forgotten_after_a_lease_unchanged() {
    let mut trust = joined(0);
    let waited = Rules::new(LEASE).waited_for();
    advance(waited - ms(1)).await;
    let now = Instant::now();
    trust.answered(now, now, &reply(0, true));
    assert!(trust.expired_peers(Instant::now()).is_empty());
    advance(ms(1)).await;
    assert_eq!(trust.expired_peers(Instant::now()), vec![(PEER, 1)]);
    // A renewal seen moves its count and starts the wait again.
    let now = Instant::now();
    let renewed = HeartbeatReply {
        members: vec![(ME, 2), (PEER, 2)],
        ..reply(0, true)
    };
    trust.answered(now, now, &renewed);
    assert!(trust.expired_peers(Instant::now()).is_empty());
}
