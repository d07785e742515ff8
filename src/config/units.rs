//! The two units settings are written in: durations (`250ms`, `5s`, `2m`, `1h`) and sizes
//! (`1048576`, `64KiB`, `256MiB`, `1GiB`).

use std::time::Duration;

use serde::Deserialize;

/// `250ms`, `5s`, `2m`, `1h`: a whole number and a unit.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    match unit.trim() {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

/// `1048576`, `64KiB`, `256MiB`, `1GiB`.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(multiplier)
}

/// A size as a user wrote it: a bare number in TOML, or text with a unit (flags, env, TOML).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum SizeText {
    Bytes(u64),
    Text(String),
}

impl std::str::FromStr for SizeText {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(SizeText::Text(s.to_owned()))
    }
}

impl SizeText {
    pub fn bytes(&self) -> Option<u64> {
        match self {
            SizeText::Bytes(n) => Some(*n),
            SizeText::Text(text) => parse_size(text),
        }
    }
}

/// Writes a duration the way it is configured, for `check-config` and the README table.
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".to_owned()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Writes a size the way it is configured.
pub fn show_size(bytes: u64) -> String {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("five"), None);
    }

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("64KiB"), Some(65536));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("1TB"), None);
        assert_eq!(parse_size("99999999999999999999GiB"), None);
    }

    #[test]
    fn shown_values_parse_back() {
        for d in ["250ms", "5s", "2m", "1h", "0s", "90s"] {
            let parsed = parse_duration(d).unwrap();
            assert_eq!(parse_duration(&show_duration(parsed)), Some(parsed));
        }
        for s in ["64KiB", "256MiB", "1GiB", "1000"] {
            let parsed = parse_size(s).unwrap();
            assert_eq!(show_size(parsed), s);
        }
    }
}
