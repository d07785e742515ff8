//! May a held entry be served, and if not, what then? The one place that answers it, from
//! plain values and without I/O, for loads and existence checks alike.
//!
//! What decides it: whether an entry is held at all (the store has already dropped one that a
//! write, purge or event ended, or one filled under another policy); whether the tier lets this
//! replica use it as it is (`trusted`: its table has not moved on in Redis, and Redis is not
//! away under `revalidate`); how old it is against its freshness (which the events' liveness
//! and the tier's trust set) and the stale windows; and whether its vended credentials may
//! still be handed out. Who the caller is (vary, confirmations) is `Entry::servable_to`'s.
//!
//! Invariants:
//! - an entry the tier does not trust is never served as it is: only revalidated, or (when the
//!   tier is away and the catalog fails) served within `stale_if_error`;
//! - an entry whose table moved on in the tier is never served, not even on error;
//! - a stale entry is served only within a stale window, and only while its credentials are
//!   servable.

use std::time::Duration;

use tokio::time::Instant;

use super::phase::CachePhase;

/// What the tier says of a held entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// It may be used as it is.
    Trusted,
    /// Its table moved on in the tier since it was filled: it says nothing of the table now.
    Moved,
    /// The tier is away (`on_redis_down = revalidate`): only the catalog can say.
    TierAway,
}

/// A held entry, as the decision sees it.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub trust: Trust,
    /// Until when it is served without asking the catalog.
    pub fresh_until: Instant,
    /// Whether its vended credentials (if any) may still be handed out now.
    pub credentials_servable: bool,
}

/// The stale windows in force.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
}

/// What a lookup does with the entry `E` it holds, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<E> {
    /// Serve the held entry as it is (HIT).
    Serve(E),
    /// Serve the held entry, and revalidate it in the background (STALE).
    ServeStale(E),
    /// Ask the catalog, leading or joining a fill.
    Fill {
        /// The held entry, which goes with the fill (its ETag makes it conditional).
        revalidating: Option<E>,
        /// Whether that entry may be served if the catalog fails (`stale_if_error`).
        stale_on_error: bool,
    },
}

/// Decides what a lookup does with what is held, at `now`.
pub fn decide<E>(held: Option<(E, Held)>, windows: Windows, now: Instant) -> Decision<E> {
    let Some((entry, held)) = held else {
        return Decision::Fill {
            revalidating: None,
            stale_on_error: false,
        };
    };
    let stale_for = now.saturating_duration_since(held.fresh_until);
    let within_stale_if_error = stale_for < windows.stale_if_error && held.credentials_servable;
    let stale_on_error = match held.trust {
        Trust::Trusted if now < held.fresh_until => return Decision::Serve(entry),
        Trust::Trusted if stale_for < windows.stale_while_revalidate => {
            return Decision::ServeStale(entry)
        }
        Trust::Trusted => within_stale_if_error,
        // Redis and the catalog both down: the last entry, within stale_if_error.
        Trust::TierAway => within_stale_if_error,
        Trust::Moved => false,
    };
    Decision::Fill {
        revalidating: Some(entry),
        stale_on_error,
    }
}

/// The phase of an answer a fill produced: joined (COALESCED), read from another replica
/// (SHARED), a held entry revalidated (REVALIDATED), or none held (MISS).
pub fn phase_of_fill(led: bool, from_tier: bool, revalidated: bool) -> CachePhase {
    match (led, from_tier, revalidated) {
        (false, _, _) => CachePhase::Coalesced,
        (true, true, _) => CachePhase::Shared,
        (true, false, true) => CachePhase::Revalidated,
        (true, false, false) => CachePhase::Miss,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn windows(stale_while_revalidate: u64, stale_if_error: u64) -> Windows {
        Windows {
            stale_while_revalidate: SECOND * stale_while_revalidate as u32,
            stale_if_error: SECOND * stale_if_error as u32,
        }
    }

    /// An entry fresh until `fresh_until`, seen `seconds_after` that.
    fn seen(trust: Trust, seconds_after: i64, credentials: bool) -> (Option<((), Held)>, Instant) {
        let fresh_until = Instant::now() + SECOND * 100;
        let now = if seconds_after >= 0 {
            fresh_until + SECOND * seconds_after as u32
        } else {
            fresh_until - SECOND * (-seconds_after) as u32
        };
        let held = Held {
            trust,
            fresh_until,
            credentials_servable: credentials,
        };
        (Some(((), held)), now)
    }

    #[test]
    fn nothing_held_is_a_fill_with_nothing_to_fall_back_on() {
        assert_eq!(
            decide::<()>(None, windows(60, 60), Instant::now()),
            Decision::Fill {
                revalidating: None,
                stale_on_error: false
            }
        );
    }

    #[test]
    fn a_trusted_fresh_entry_is_served() {
        let (held, now) = seen(Trust::Trusted, -1, true);
        assert_eq!(decide(held, windows(0, 0), now), Decision::Serve(()));
    }

    #[test]
    fn freshness_ends_at_its_instant() {
        let (held, now) = seen(Trust::Trusted, 0, true);
        assert_ne!(decide(held, windows(0, 0), now), Decision::Serve(()));
    }

    #[test]
    fn a_trusted_stale_entry_within_stale_while_revalidate_is_served_and_revalidated() {
        let (held, now) = seen(Trust::Trusted, 5, true);
        assert_eq!(decide(held, windows(10, 0), now), Decision::ServeStale(()));
    }

    #[test]
    fn past_stale_while_revalidate_the_entry_is_revalidated_with_stale_if_error_behind_it() {
        let (held, now) = seen(Trust::Trusted, 15, true);
        assert_eq!(
            decide(held, windows(10, 20), now),
            Decision::Fill {
                revalidating: Some(()),
                stale_on_error: true
            }
        );
    }

    #[test]
    fn past_stale_if_error_nothing_stale_is_served_on_error() {
        let (held, now) = seen(Trust::Trusted, 25, true);
        assert_eq!(
            decide(held, windows(10, 20), now),
            Decision::Fill {
                revalidating: Some(()),
                stale_on_error: false
            }
        );
    }

    #[test]
    fn an_entry_whose_credentials_may_not_be_handed_out_is_not_served_on_error() {
        let (held, now) = seen(Trust::Trusted, 5, false);
        assert_eq!(
            decide(held, windows(0, 60), now),
            Decision::Fill {
                revalidating: Some(()),
                stale_on_error: false
            }
        );
    }

    #[test]
    fn an_entry_whose_table_moved_on_in_the_tier_is_never_served_even_fresh_or_on_error() {
        for after in [-50, 5, 50] {
            let (held, now) = seen(Trust::Moved, after, true);
            assert_eq!(
                decide(held, windows(3600, 3600), now),
                Decision::Fill {
                    revalidating: Some(()),
                    stale_on_error: false
                },
                "{after}s after freshness"
            );
        }
    }

    #[test]
    fn with_the_tier_away_a_fresh_entry_is_only_revalidated_but_may_stand_in_on_error() {
        let (held, now) = seen(Trust::TierAway, -50, true);
        assert_eq!(
            decide(held, windows(3600, 1), now),
            Decision::Fill {
                revalidating: Some(()),
                stale_on_error: true
            }
        );
        let (held, now) = seen(Trust::TierAway, 5, true);
        assert_eq!(
            decide(held, windows(3600, 1), now),
            Decision::Fill {
                revalidating: Some(()),
                stale_on_error: false
            },
            "stale_while_revalidate does not apply to an entry the tier cannot vouch for"
        );
    }

    #[test]
    fn the_phase_of_a_fill_names_who_produced_it() {
        assert_eq!(phase_of_fill(false, true, true), CachePhase::Coalesced);
        assert_eq!(phase_of_fill(true, true, false), CachePhase::Shared);
        assert_eq!(phase_of_fill(true, false, true), CachePhase::Revalidated);
        assert_eq!(phase_of_fill(true, false, false), CachePhase::Miss);
    }
}
