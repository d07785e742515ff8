//! A loadTable request to the catalog whose headers are built only when a whole set is needed.
//!
//! A cache hit reads a handful of the headers the catalog would be sent (the caller's
//! credentials, the delegation modes, `If-None-Match`, what the entry varies on) and sends
//! nothing. Building the whole set costs more than the rest of the hit, so each name is read as
//! it would be sent: from the client's own headers where the forwarding rules leave that name
//! alone, as absent where they remove it, and from the built set (made once, on first need)
//! wherever they write or join it. A fill, a bypass and a stream build the set with the same
//! code as every other route (`sent_headers`), and a property test holds every lookup to that
//! set, name by name.

use std::sync::{LazyLock, OnceLock};

use http::header::{self, GetAll, HeaderMap, HeaderName, HeaderValue};
use http::uri::Authority;
use http::{Method, Uri};

use super::request::{
    join, sent_headers, OriginRequest, Sending, UnsendablePath, UpstreamUrl, CONDITIONALS,
};
use crate::catalog::route::Operation;
use crate::wire::headers::HeaderLookup;
use crate::wire::name_bits::NameBits;

pub struct Outgoing {
    pub method: Method,
    /// Joined under the upstream's base path when the request arrives: a path that cannot be
    /// sent fails at once, hit or not.
    pub uri: Uri,
    pub operation: Operation,
    /// The client's headers, as it sent them.
    client: HeaderMap,
    /// The client's HTTP/2 `:authority`.
    authority: Option<Authority>,
    how: Sending,
    /// Whether the client sent `Connection`.
    connection: bool,
    /// Which names the client's headers may hold: most names a hit reads are absent.
    names: NameBits,
    /// The headers as sent, once something needs them.
    /// Boxed: a hit never builds it, and moves the request a few times.
    built: OnceLock<Box<HeaderMap>>,
    /// Whether `client` was handed on as an answer's map (`spare_headers`).
    spent: bool,
}

/// Where the value of one header as sent is found.
enum Source {
    Client,
    Absent,
    Built,
}

static NONE: LazyLock<HeaderMap> = LazyLock::new(HeaderMap::new);
static IDENTITY: LazyLock<HeaderMap> = LazyLock::new(|| {
    let mut map = HeaderMap::with_capacity(1);
    map.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    map
});

impl Outgoing {
    pub fn new(
        parts: http::request::Parts,
        how: Sending,
        operation: Operation,
        url: &UpstreamUrl,
    ) -> Result<Self, UnsendablePath> {
        let names = NameBits::of(&parts.headers);
        Ok(Outgoing {
            uri: join(url, parts.uri.path_and_query())?,
            authority: parts.uri.authority().cloned(),
            method: parts.method,
            operation,
            connection: names.may_hold(&header::CONNECTION)
                && parts.headers.contains_key(header::CONNECTION),
            names,
            client: parts.headers,
            how,
            built: OnceLock::new(),
            spent: false,
        })
    }

    /// The client's header map, for an answer's head to be written into once emptied (its room
    /// is the size of a request's head, which hyper reuses for the connection's next request).
    /// Taken only once the answer is decided: the request's headers are not read after.
    pub fn spare_headers(&mut self) -> HeaderMap {
        self.spent = true;
        std::mem::take(&mut self.client)
    }

    /// The client's own headers (what it accepts, not what the catalog is asked for).
    pub fn client_headers(&self) -> &HeaderMap {
        debug_assert!(
            !self.spent,
            "a request's headers read after its answer took them"
        );
        &self.client
    }

    /// The request as the route sends it.
    pub fn request(&self) -> OriginRequest {
        OriginRequest {
            method: self.method.clone(),
            uri: self.uri.clone(),
            headers: self.built().clone(),
            operation: self.operation,
        }
    }

    /// The request as a cache fill sends it (`OriginRequest::for_fill`).
    pub fn fill_request(&self) -> OriginRequest {
        self.request().for_fill()
    }

    /// Its headers as the route sends them, one name at a time.
    pub fn as_sent(&self) -> Sent<'_> {
        Sent {
            outgoing: self,
            fill: false,
        }
    }

    /// Its headers as a fill sends them, one name at a time.
    pub fn as_filled(&self) -> Sent<'_> {
        Sent {
            outgoing: self,
            fill: true,
        }
    }

    fn built(&self) -> &HeaderMap {
        self.built.get_or_init(|| {
            debug_assert!(
                !self.spent,
                "a request's headers read after its answer took them"
            );
            Box::new(sent_headers(
                &self.client,
                self.authority.as_ref(),
                &self.how,
            ))
        })
    }

    /// Where `sent_headers` leaves the value of `name`: one match on the name, since a hit
    /// asks this of every header it reads (a test holds the hop-by-hop names to the list the
    /// forwarding rules remove).
    fn source(&self, name: &HeaderName) -> Source {
        debug_assert!(
            !self.spent,
            "a request's headers read after its answer took them"
        );
        // `Connection` may name any header as hop-by-hop (rare): read the built set.
        if self.connection {
            return Source::Built;
        }
        match name.as_str() {
            "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
            | "host" => Source::Absent,
            "x-iceberg-access-delegation" if !self.how.forwards_delegation => Source::Absent,
            // One `Cookie` line is sent as it is; several are joined.
            "cookie"
                if self.names.may_hold(&header::COOKIE)
                    && self.client.get_all(header::COOKIE).iter().nth(1).is_some() =>
            {
                Source::Built
            }
            "x-forwarded-for" | "x-forwarded-host" | "x-forwarded-proto" | "x-request-id" => {
                Source::Built
            }
            "accept-encoding" if self.how.identity_encoding => Source::Built,
            _ => Source::Client,
        }
    }
}

/// One view of an `Outgoing`'s headers.
pub struct Sent<'a> {
    outgoing: &'a Outgoing,
    /// As a fill sends them: unconditional, for the identity encoding.
    fill: bool,
}

impl HeaderLookup for Sent<'_> {
    fn values(&self, name: &HeaderName) -> GetAll<'_, HeaderValue> {
        let outgoing = self.outgoing;
        if self.fill && CONDITIONALS.contains(name) {
            return NONE.get_all(name);
        }
        if self.fill && name == header::ACCEPT_ENCODING {
            return IDENTITY.get_all(name);
        }
        match outgoing.source(name) {
            Source::Client if !outgoing.names.may_hold(name) => NONE.get_all(name),
            Source::Client => outgoing.client.get_all(name),
            Source::Absent => NONE.get_all(name),
            Source::Built => outgoing.built().get_all(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::origin::request::ACCESS_DELEGATION;
    use crate::wire::headers::HOP_BY_HOP;
    use proptest::prelude::*;

    fn how(forwards_delegation: bool, identity_encoding: bool) -> Sending {
        Sending {
            peer: "10.0.0.9:5000".parse().unwrap(),
            proto: "https",
            forwards_delegation,
            request_id: crate::wire::request_id::RequestId::of(&HeaderMap::new()),
            identity_encoding,
        }
    }

    /// Names the forwarding rules treat differently, and some they leave alone.
    const NAMES: &[&str] = &[
        "authorization",
        "cookie",
        "x-api-key",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
        "transfer-encoding",
        "trailer",
        "proxy-authenticate",
        "proxy-authorization",
        "host",
        "content-length",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-iceberg-access-delegation",
        "if-none-match",
        "if-match",
        "if-modified-since",
        "accept-encoding",
        "x-request-id",
        "origin",
        "x-secret",
    ];

    const VALUES: &[&str] = &[
        "a",
        "Bearer t",
        "gzip, br",
        "x-secret",
        "authorization, cookie",
        "origin,x-api-key",
        "close",
        "10.1.1.1, 10.2.2.2",
        "",
        "vended-credentials",
        "\"e\"",
    ];

    fn parts(lines: &[(usize, usize)], authority: bool) -> http::request::Parts {
        let target = if authority {
            "http://client.example:8181/v1/p/namespaces/db/tables/t"
        } else {
            "/v1/p/namespaces/db/tables/t"
        };
        let mut builder = http::Request::get(target);
        for &(name, value) in lines {
            builder = builder.header(NAMES[name], VALUES[value]);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn url() -> UpstreamUrl {
        UpstreamUrl {
            scheme: http::uri::Scheme::HTTP,
            authority: "catalog:9001".parse().unwrap(),
            base_path: String::new(),
        }
    }

    fn values<'a>(all: GetAll<'a, HeaderValue>) -> Vec<&'a HeaderValue> {
        all.iter().collect()
    }

    proptest! {
        /// Every header a hit reads is what the catalog would be sent, as the route sends it
        /// and as a fill does.
        #[test]
        fn every_lookup_is_the_built_request(
            lines in proptest::collection::vec((0..NAMES.len(), 0..VALUES.len()), 0..12),
            forwards in any::<bool>(),
            identity in any::<bool>(),
            authority in any::<bool>(),
        ) {
            let how = how(forwards, identity);
            let parts = parts(&lines, authority);
            let eager = OriginRequest::new(&parts, &how, Operation::LoadTable, &url()).unwrap();
            let filled = eager.clone().for_fill();
            let outgoing = Outgoing::new(parts, how, Operation::LoadTable, &url()).unwrap();
            let (as_sent, as_filled) = (outgoing.as_sent(), outgoing.as_filled());
            for name in NAMES {
                let name = HeaderName::from_static(name);
                prop_assert_eq!(
                    values(as_sent.values(&name)),
                    values(eager.headers.get_all(&name)),
                    "as sent: {}", name
                );
                prop_assert_eq!(
                    values(as_filled.values(&name)),
                    values(filled.headers.get_all(&name)),
                    "as filled: {}", name
                );
            }
            prop_assert_eq!(&outgoing.request().headers, &eager.headers);
            prop_assert_eq!(&outgoing.fill_request().headers, &filled.headers);
            prop_assert_eq!(outgoing.request().uri, eager.uri);
        }
    }

    #[test]
    fn every_name_the_forwarding_rules_treat_apart_is_looked_up_apart() {
        let parts = parts(&[], false);
        let outgoing =
            Outgoing::new(parts, how(false, true), Operation::LoadTable, &url()).unwrap();
        for name in HOP_BY_HOP
            .iter()
            .chain(&[header::CONTENT_LENGTH, header::HOST])
        {
            assert!(matches!(outgoing.source(name), Source::Absent), "{name}");
        }
        assert!(matches!(
            outgoing.source(&ACCESS_DELEGATION),
            Source::Absent
        ));
        for name in [
            "x-forwarded-for",
            "x-forwarded-host",
            "x-forwarded-proto",
            "x-request-id",
        ] {
            let name = HeaderName::from_static(name);
            assert!(matches!(outgoing.source(&name), Source::Built), "{name}");
        }
        assert!(matches!(
            outgoing.source(&header::ACCEPT_ENCODING),
            Source::Built
        ));
    }

    #[test]
    fn a_hit_that_reads_plain_headers_builds_nothing() {
        let parts = parts(&[(0, 1), (15, 10)], false);
        let outgoing =
            Outgoing::new(parts, how(true, false), Operation::LoadTable, &url()).unwrap();
        let name = HeaderName::from_static("authorization");
        assert_eq!(values(outgoing.as_sent().values(&name)), ["Bearer t"]);
        assert!(values(outgoing.as_filled().values(&header::IF_NONE_MATCH)).is_empty());
        assert!(outgoing.built.get().is_none());
    }

    #[test]
    fn a_connection_header_makes_every_lookup_read_the_built_set() {
        // `Connection: authorization, cookie` removes the credentials from what is sent.
        let parts = parts(&[(0, 1), (3, 4)], false);
        let outgoing =
            Outgoing::new(parts, how(true, false), Operation::LoadTable, &url()).unwrap();
        let name = HeaderName::from_static("authorization");
        assert!(values(outgoing.as_sent().values(&name)).is_empty());
        assert!(outgoing.built.get().is_some());
    }
}
