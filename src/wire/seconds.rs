//! A count of seconds as a header value (`Age`) without an allocation for every answer: the
//! decimal spellings of 0 to 9,999 are written once into one static string, and a value is a
//! view of it (`Bytes::from_static` holds no count, so the threads share it freely).

use std::sync::OnceLock;

use http::HeaderValue;

/// Ages below this are views of the table; an entry older than 2 h 46 min gets its own value.
const TABLED: u64 = 10_000;

/// Where the spelling of `n` (below `TABLED`) starts: all shorter numbers come first.
fn offset(n: usize) -> usize {
    match n {
        0..=9 => n,
        10..=99 => 10 + 2 * (n - 10),
        100..=999 => 190 + 3 * (n - 100),
        _ => 2890 + 4 * (n - 1000),
    }
}

fn digits(n: usize) -> usize {
    match n {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        _ => 4,
    }
}

fn table() -> &'static str {
    static TABLE: OnceLock<&'static str> = OnceLock::new();
    TABLE.get_or_init(|| {
        let text: String = (0..TABLED).map(|n| n.to_string()).collect();
        Box::leak(text.into_boxed_str())
    })
}

/// `n` in decimal, as a header value.
pub fn seconds_value(n: u64) -> HeaderValue {
    match usize::try_from(n) {
        Ok(n) if n < TABLED as usize => {
            let start = offset(n);
            HeaderValue::from_static(&table()[start..start + digits(n)])
        }
        _ => HeaderValue::from(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tabled_number_is_spelled_as_decimal() {
        for n in 0..TABLED {
            assert_eq!(seconds_value(n).to_str().ok(), Some(n.to_string().as_str()));
        }
    }

    #[test]
    fn numbers_past_the_table_are_spelled_too() {
        for n in [TABLED, 86_400, u64::MAX] {
            assert_eq!(seconds_value(n).to_str().ok(), Some(n.to_string().as_str()));
        }
    }
}
