//! A value that must never be shown (the admin token, an event source's token): `Debug` writes
//! `(redacted)`, and the value is read only through `expose`. A URL that may carry a password
//! is shown only through `shown_url`.

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

/// A URL without its user, password or query (a password may also be given as one), to show.
pub fn shown_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(not a URL)".to_owned();
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    match rest.rfind('@') {
        Some(at) => format!("{scheme}://…@{}", &rest[at + 1..]),
        None => format!("{scheme}://{rest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_url_keeps_neither_user_nor_password_nor_query() {
        assert_eq!(
            shown_url("redis://user:pw@127.0.0.1:6379/0?password=x"),
            "redis://…@127.0.0.1:6379/0"
        );
        assert_eq!(shown_url("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(shown_url("127.0.0.1:4222"), "(not a URL)");
    }

    #[test]
    fn a_secret_debugs_as_redacted() {
        assert_eq!(format!("{:?}", Secret::new("s3cr3t".into())), "(redacted)");
    }
}
