//! Credentials marked sensitive on arrival, before anything could log them: a marked value is
//! shown as `Sensitive` by `Debug`, and HTTP/2 never indexes it in HPACK tables.
//!
//! One pass over the request's fields, comparing names (tower-http's layer looks each listed
//! name up in the map's table, which reserves room for an insertion on every lookup).

use http::{HeaderMap, HeaderName};

/// Marks every value of a field named in `names` sensitive.
pub fn mark(headers: &mut HeaderMap, names: &[HeaderName]) {
    for (name, value) in headers.iter_mut() {
        if names.contains(name) {
            value.set_sensitive(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{AUTHORIZATION, COOKIE, HOST};
    use http::HeaderValue;

    #[test]
    fn every_value_of_a_listed_field_is_marked_and_no_other() {
        let mut headers = HeaderMap::new();
        headers.append(AUTHORIZATION, HeaderValue::from_static("Bearer a"));
        headers.append(AUTHORIZATION, HeaderValue::from_static("Bearer b"));
        headers.append(COOKIE, HeaderValue::from_static("s=1"));
        headers.append(HOST, HeaderValue::from_static("catalog"));
        headers.append("x-api-key", HeaderValue::from_static("k"));
        let names = [AUTHORIZATION, HeaderName::from_static("x-api-key")];
        mark(&mut headers, &names);
        assert!(headers
            .get_all(AUTHORIZATION)
            .iter()
            .all(HeaderValue::is_sensitive));
        assert_eq!(headers.get_all(AUTHORIZATION).iter().count(), 2);
        assert!(headers["x-api-key"].is_sensitive());
        assert!(!headers[COOKIE].is_sensitive());
        assert!(!headers[HOST].is_sensitive());
        assert!(!format!("{headers:?}").contains("Bearer"));
    }
}
