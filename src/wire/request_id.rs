//! A request's id: the client's `X-Request-Id` when it is a sensible token, else one of
//! icecache's own (`{process:08x}-{n:x}`: a random per-process part and a counter). Only the
//! number is taken per request; the id is spelled when something reads it (the catalog request,
//! a log line, an error), which a hit whose line is not logged never does.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::{HeaderMap, HeaderValue};

use crate::origin::X_REQUEST_ID;

/// The longest client id taken as it is.
const MAX_GIVEN: usize = 128;

/// Ids a thread takes from the process's count at a time: each worker numbers its requests
/// from a block of its own, instead of every request counting on one shared number (an atomic
/// that the workers' cores would pass back and forth).
const BLOCK: u64 = 1 << 16;

/// The next of this process's own numbers, unique across its threads.
fn next_own() -> u64 {
    static NEXT_BLOCK: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        /// The next number of this thread's block, and the end of the block.
        static BLOCK_LEFT: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    }
    BLOCK_LEFT.with(|left| {
        let (mut next, mut end) = left.get();
        if next == end {
            next = NEXT_BLOCK.fetch_add(BLOCK, Ordering::Relaxed).max(1);
            end = next.saturating_add(BLOCK) & !(BLOCK - 1);
        }
        left.set((next + 1, end));
        next
    })
}

#[derive(Clone, Debug)]
pub struct RequestId(Id);

#[derive(Clone, Debug)]
enum Id {
    /// The client's, checked to be a token of `[A-Za-z0-9-_.:]`.
    Given(HeaderValue),
    /// The n-th of this process.
    Own(u64),
}

impl RequestId {
    /// The id of a request with these headers: the client's when it is sensible, else a new one.
    pub fn of(headers: &HeaderMap) -> RequestId {
        match headers
            .get(&X_REQUEST_ID)
            .filter(|v| sensible(v.as_bytes()))
        {
            Some(given) => RequestId(Id::Given(given.clone())),
            None => RequestId(Id::Own(next_own())),
        }
    }

    /// The id as a header value, for the catalog request.
    pub fn header_value(&self) -> HeaderValue {
        match &self.0 {
            Id::Given(value) => value.clone(),
            Id::Own(n) => {
                let (bytes, len) = own(*n);
                HeaderValue::from_bytes(&bytes[..len]).unwrap_or(HeaderValue::from_static("0"))
            }
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Id::Given(value) => f.write_str(value.to_str().unwrap_or("")),
            Id::Own(n) => {
                let (bytes, len) = own(*n);
                f.write_str(std::str::from_utf8(&bytes[..len]).unwrap_or("0"))
            }
        }
    }
}

fn sensible(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_GIVEN
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(b))
}

/// `{process:08x}-{n:x}` as bytes and their length.
fn own(n: u64) -> ([u8; 8 + 1 + 16], usize) {
    static PROCESS: OnceLock<u32> = OnceLock::new();
    let process = *PROCESS.get_or_init(|| {
        let mut bytes = [0u8; 4];
        let _ = getrandom::getrandom(&mut bytes);
        u32::from_le_bytes(bytes)
    });
    let mut id = [0u8; 8 + 1 + 16];
    hex_into(&mut id[..8], u64::from(process));
    id[8] = b'-';
    let digits = (64 - n.leading_zeros()).div_ceil(4).max(1) as usize;
    hex_into(&mut id[9..9 + digits], n);
    (id, 9 + digits)
}

/// Writes the low hex digits of `n` into `out`, most significant first, zero padded.
fn hex_into(out: &mut [u8], mut n: u64) {
    for byte in out.iter_mut().rev() {
        *byte = b"0123456789abcdef"[(n & 0xf) as usize];
        n >>= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_header(value: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            X_REQUEST_ID.clone(),
            HeaderValue::from_bytes(value).unwrap(),
        );
        headers
    }

    #[test]
    fn hex_digits_are_written_most_significant_first() {
        let mut out = [0u8; 8];
        hex_into(&mut out, 0xbeef);
        assert_eq!(&out, b"0000beef");
        let mut one = [0u8; 1];
        hex_into(&mut one, 0);
        assert_eq!(&one, b"0");
    }

    #[test]
    fn a_sensible_client_id_is_kept_as_it_is() {
        let id = RequestId::of(&with_header(b"trace-1.a:B_2"));
        assert_eq!(id.to_string(), "trace-1.a:B_2");
        assert_eq!(id.header_value(), "trace-1.a:B_2");
    }

    #[test]
    fn a_client_id_that_is_not_a_token_or_too_long_is_replaced() {
        for bad in [
            &b"a b"[..],
            b"a,b",
            b"",
            &[b'x'; MAX_GIVEN + 1],
            b"caf\xc3\xa9",
        ] {
            let id = RequestId::of(&with_header(bad)).to_string();
            assert_ne!(id.as_bytes(), bad);
            assert_own_shape(&id);
        }
        assert_eq!(
            RequestId::of(&with_header(&[b'x'; MAX_GIVEN]))
                .to_string()
                .len(),
            MAX_GIVEN
        );
    }

    fn assert_own_shape(id: &str) {
        let (process, n) = id.split_once('-').expect("process-n");
        assert_eq!(process.len(), 8, "{id}");
        assert!(process.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert!(
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
    }

    #[test]
    fn own_ids_are_distinct_and_spelled_alike_everywhere() {
        let a = RequestId::of(&HeaderMap::new());
        let b = RequestId::of(&HeaderMap::new());
        assert_ne!(a.to_string(), b.to_string());
        assert_own_shape(&a.to_string());
        assert_eq!(a.header_value(), a.to_string().as_str());
        assert_eq!(a.clone().to_string(), a.to_string());
    }

    #[test]
    fn own_numbers_are_unique_across_threads_and_never_zero() {
        let taken: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| (0..2 * BLOCK + 3).map(|_| next_own()).collect()))
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut all: Vec<u64> = taken.concat();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "a number was given twice");
        assert!(all[0] > 0);
        for numbers in &taken {
            assert!(
                numbers.windows(2).all(|w| w[0] < w[1]),
                "a thread's numbers go up"
            );
        }
    }
}
