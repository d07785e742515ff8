//! A value that must never be shown (the admin token, an event source's token): `Debug` writes
//! `(redacted)`, and the value is read only through `expose`.

/// A value that must never be shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(redacted)")
    }
}
