//! The form of a request's target and the codings of its body: what icecache can pass on as it
//! was meant. A target in a form the catalog would read otherwise (`GET a:80` is sent as
//! `GET /` by an HTTP client), or a body coded in a way icecache does not undo, is refused
//! before anything reads it (RFC 9112 §3.2, §6.1).

use http::header::{self, HeaderMap};
use http::{Method, Uri};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("the request target must be a path or an absolute http(s) URI; the authority form is CONNECT's")]
    AuthorityForm,
    #[error("the request target `*` is for OPTIONS alone")]
    Asterisk,
    #[error("an absolute request target must be an http or https URI")]
    Scheme,
    #[error(
        "the request body is coded with something other than chunked, which icecache does not undo"
    )]
    TransferCoding,
}

/// Checks the target's form: origin-form (a path), absolute-form with `http` or `https`, or
/// `*` for OPTIONS.
pub fn check_target(method: &Method, uri: &Uri) -> Result<(), TargetError> {
    if uri.path_and_query().is_none() {
        // An authority alone (`a:80`): CONNECT's form, which icecache refuses as a tunnel.
        return Err(TargetError::AuthorityForm);
    }
    if uri.path() == "*" && method != Method::OPTIONS {
        return Err(TargetError::Asterisk);
    }
    match uri.scheme_str() {
        None | Some("http" | "https") => Ok(()),
        Some(_) => Err(TargetError::Scheme),
    }
}

/// Checks that a body with a `Transfer-Encoding` is coded `chunked` alone, once (hyper undoes
/// one chunking and would hand on any coding beneath it, a second chunking too, as if it were
/// the body).
pub fn check_transfer_coding(headers: &HeaderMap) -> Result<(), TargetError> {
    let mut codings = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|coding| !coding.is_empty());
    match (codings.next(), codings.next()) {
        (None, _) => Ok(()),
        (Some(coding), None) if coding.eq_ignore_ascii_case(b"chunked") => Ok(()),
        _ => Err(TargetError::TransferCoding),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn target(method: Method, target: &str) -> Result<(), TargetError> {
        check_target(&method, &target.parse::<Uri>().unwrap())
    }

    #[test]
    fn a_path_or_an_absolute_http_uri_is_a_target() {
        for t in [
            "/v1/config",
            "/",
            "http://a/v1/config",
            "https://a:8/x?y",
            "HTTP://a/",
        ] {
            assert_eq!(target(Method::GET, t), Ok(()), "{t}");
        }
        assert_eq!(target(Method::OPTIONS, "*"), Ok(()));
    }

    #[test]
    fn an_authority_an_asterisk_or_another_scheme_is_not() {
        assert_eq!(target(Method::GET, "a:80"), Err(TargetError::AuthorityForm));
        assert_eq!(
            target(Method::POST, "a:80"),
            Err(TargetError::AuthorityForm)
        );
        assert_eq!(target(Method::GET, "*"), Err(TargetError::Asterisk));
        assert_eq!(target(Method::DELETE, "*"), Err(TargetError::Asterisk));
        assert_eq!(target(Method::GET, "ftp://a/x"), Err(TargetError::Scheme));
        assert_eq!(target(Method::GET, "ws://a/x"), Err(TargetError::Scheme));
    }

    fn coded(values: &[&str]) -> Result<(), TargetError> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(
                header::TRANSFER_ENCODING,
                HeaderValue::from_str(value).unwrap(),
            );
        }
        check_transfer_coding(&headers)
    }

    #[test]
    fn a_body_coded_chunked_alone_is_read() {
        assert_eq!(coded(&[]), Ok(()));
        assert_eq!(coded(&["chunked"]), Ok(()));
        assert_eq!(coded(&["Chunked"]), Ok(()));
        assert_eq!(coded(&[" chunked "]), Ok(()));
        assert_eq!(coded(&[", chunked"]), Ok(()));
    }

    #[test]
    fn a_body_coded_otherwise_is_refused() {
        for values in [
            &["gzip, chunked"][..],
            &["gzip", "chunked"],
            &["chunked, identity"],
            &["deflate,chunked"],
            &["x-custom"],
            &["chunked, chunked"],
            &["chunked", "chunked"],
        ] {
            assert_eq!(
                coded(values),
                Err(TargetError::TransferCoding),
                "{values:?}"
            );
        }
    }
}
