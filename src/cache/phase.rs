//! How an answer was produced, why one was not cached, and what made entries leave: the
//! `x-cache` and `Cache-Status` headers, the metrics labels and the log fields all come from
//! these enums.

use http::HeaderValue;

use crate::catalog::route::Operation;
use crate::telemetry::Label;

/// How a loadTable answer was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CachePhase {
    /// Served from a fresh entry.
    Hit,
    /// Fetched from the catalog by this request.
    Miss,
    /// Not held here: read from an entry another replica shared in Redis, without the catalog.
    Shared,
    /// A stale entry (or this caller's right to it) was confirmed or replaced by this request.
    Revalidated,
    /// A stale entry served without confirmation (revalidating in the background, or the
    /// catalog failing within `stale_if_error`).
    Stale,
    /// Answered by another request's fill.
    Coalesced,
    /// Not cacheable: answered from the catalog without the cache.
    Bypass,
}

impl CachePhase {
    pub fn as_str(self) -> &'static str {
        match self {
            CachePhase::Hit => "HIT",
            CachePhase::Miss => "MISS",
            CachePhase::Shared => "SHARED",
            CachePhase::Revalidated => "REVALIDATED",
            CachePhase::Stale => "STALE",
            CachePhase::Coalesced => "COALESCED",
            CachePhase::Bypass => "BYPASS",
        }
    }

    /// The `x-cache` value, built at compile time (a value from a `&str` checks each byte).
    pub fn x_cache_value(self) -> HeaderValue {
        match self {
            CachePhase::Hit => const { HeaderValue::from_static("HIT") },
            CachePhase::Miss => const { HeaderValue::from_static("MISS") },
            CachePhase::Shared => const { HeaderValue::from_static("SHARED") },
            CachePhase::Revalidated => const { HeaderValue::from_static("REVALIDATED") },
            CachePhase::Stale => const { HeaderValue::from_static("STALE") },
            CachePhase::Coalesced => const { HeaderValue::from_static("COALESCED") },
            CachePhase::Bypass => const { HeaderValue::from_static("BYPASS") },
        }
    }

    /// The `Cache-Status` value, built at compile time.
    pub fn cache_status_value(self) -> HeaderValue {
        match self {
            CachePhase::Hit => const { HeaderValue::from_static("icecache; hit") },
            CachePhase::Shared => {
                const { HeaderValue::from_static("icecache; hit; detail=shared") }
            }
            CachePhase::Stale => const { HeaderValue::from_static("icecache; hit; detail=stale") },
            CachePhase::Miss => const { HeaderValue::from_static("icecache; fwd=uri-miss") },
            CachePhase::Revalidated => const { HeaderValue::from_static("icecache; fwd=stale") },
            CachePhase::Coalesced => {
                const { HeaderValue::from_static("icecache; fwd=uri-miss; collapsed") }
            }
            CachePhase::Bypass => const { HeaderValue::from_static("icecache; fwd=bypass") },
        }
    }

    /// The `Cache-Status` value (RFC 9211 §2), the product's name as the cache's. It says
    /// nothing of `stored`: an entry a write overtook is handed to its waiters unkept.
    pub fn cache_status(self) -> &'static str {
        match self {
            CachePhase::Hit => "icecache; hit",
            CachePhase::Shared => "icecache; hit; detail=shared",
            CachePhase::Stale => "icecache; hit; detail=stale",
            CachePhase::Miss => "icecache; fwd=uri-miss",
            CachePhase::Revalidated => "icecache; fwd=stale",
            CachePhase::Coalesced => "icecache; fwd=uri-miss; collapsed",
            CachePhase::Bypass => "icecache; fwd=bypass",
        }
    }
}

/// Why an answer was not stored (or a request not looked up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoCacheReason {
    /// A query parameter icecache does not know: a catalog extension may change the body.
    UnknownParameter,
    /// A query icecache cannot read one way only (a repeated parameter, `;`, bad escapes).
    AmbiguousQuery,
    /// A path that spells a plus as `%2B`: decoded, it names what a literal `+` names, which
    /// some catalogs read as a space.
    AmbiguousName,
    /// Not a 200.
    NotOk,
    /// Not a JSON LoadTableResult in the identity encoding.
    NotLoadTableResult,
    /// `Cache-Control: no-store`.
    NoStore,
    /// `Cache-Control: private` under an identity policy that shares entries.
    Private,
    /// The catalog varies the answer on a header the key does not hold.
    Vary,
    /// Larger than `cache.max_entry_bytes`.
    TooLarge,
    /// A write or purge touched the table while the answer was on its way.
    Superseded,
}

impl crate::telemetry::Label for CachePhase {
    fn as_str(self) -> &'static str {
        CachePhase::as_str(self)
    }
}

impl crate::telemetry::Label for NoCacheReason {
    fn as_str(self) -> &'static str {
        NoCacheReason::as_str(self)
    }
}

impl NoCacheReason {
    pub fn as_str(self) -> &'static str {
        match self {
            NoCacheReason::UnknownParameter => "unknown_parameter",
            NoCacheReason::AmbiguousQuery => "ambiguous_query",
            NoCacheReason::AmbiguousName => "ambiguous_name",
            NoCacheReason::NotOk => "not_ok",
            NoCacheReason::NotLoadTableResult => "not_load_table_result",
            NoCacheReason::NoStore => "no_store",
            NoCacheReason::Private => "private",
            NoCacheReason::Vary => "vary",
            NoCacheReason::TooLarge => "too_large",
            NoCacheReason::Superseded => "superseded",
        }
    }
}

/// What made entries leave: a label of `icecache_cache_invalidations_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A write through this replica, by its operation.
    Write(Operation),
    Purge,
    /// A catalog change event.
    Event,
    /// Another replica's write, announced through the tier.
    Tier,
}

impl Label for Cause {
    fn as_str(self) -> &'static str {
        match self {
            Cause::Write(operation) => operation.as_str(),
            Cause::Purge => "purge",
            Cause::Event => "event",
            Cause::Tier => "cluster",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CachePhase::{self, *};

    const ALL: [CachePhase; 7] = [Hit, Miss, Shared, Revalidated, Stale, Coalesced, Bypass];

    #[test]
    fn cache_status_says_hit_exactly_when_the_catalog_was_not_asked() {
        for phase in ALL {
            let value = phase.cache_status();
            let asked = matches!(phase, Miss | Revalidated | Coalesced | Bypass);
            assert!(value.starts_with("icecache; "), "{value}");
            assert_eq!(value.contains("; hit"), !asked, "{value}");
            assert_eq!(value.contains("; fwd="), asked, "{value}");
        }
    }

    #[test]
    fn only_a_joined_fill_is_collapsed() {
        for phase in ALL {
            assert_eq!(
                phase.cache_status().contains("collapsed"),
                phase == Coalesced
            );
        }
    }
}
