//! One request as every part of the handler sees it (`Exchange`), what a part answers with
//! (`Answer`), and the request to the catalog built from it: what is sent, how, and the shape of
//! the answer the policy stage reads.

use std::net::SocketAddr;
use std::sync::Arc;

use http::Response;

use crate::cache::{CachePhase, NoCacheReason};
use crate::catalog::route::{Operation, Route};
use crate::config::Settings;
use crate::error::ProxyError;
use crate::origin::{OriginRequest, Outgoing, Sending};
use crate::policy::stage::Shape;
use crate::policy::{Credentials, Policy};
use crate::state::State;
use crate::wire::body::Body;
use crate::wire::request_id::RequestId;

/// One request, as every part of the handler sees it.
pub struct Exchange<'a> {
    pub state: &'a State,
    pub settings: Arc<Settings>,
    pub route: Route,
    pub policy: Arc<Policy>,
    pub peer: SocketAddr,
    pub request_id: &'a RequestId,
}

/// An exchange's own parts, apart from what it borrows: what the future that finishes a
/// request keeps until it runs.
pub struct Admitted {
    pub settings: Arc<Settings>,
    pub route: Route,
    pub policy: Arc<Policy>,
    pub peer: SocketAddr,
}

impl Admitted {
    pub fn exchange<'a>(self, state: &'a State, request_id: &'a RequestId) -> Exchange<'a> {
        Exchange {
            state,
            settings: self.settings,
            route: self.route,
            policy: self.policy,
            peer: self.peer,
            request_id,
        }
    }
}

impl Exchange<'_> {
    pub fn admitted(self) -> Admitted {
        Admitted {
            settings: self.settings,
            route: self.route,
            policy: self.policy,
            peer: self.peer,
        }
    }
}

/// What a part of the handler answers with.
pub struct Answer {
    pub response: Response<Body>,
    pub phase: Option<CachePhase>,
    pub reason: Option<NoCacheReason>,
}

impl Answer {
    pub fn plain(response: Response<Body>) -> Answer {
        Answer {
            response,
            phase: None,
            reason: None,
        }
    }
}

/// Whether an answer of `shape` goes through the policy stage under `policy`.
pub fn processes(shape: Option<Shape>, policy: &Policy) -> bool {
    shape.is_some() && policy.credentials != Credentials::Passthrough
}

/// The request to the catalog for a client's request, built once: the key (for loadTable) and
/// what is sent are both derived from it.
pub fn origin_request(
    exchange: &Exchange<'_>,
    parts: &http::request::Parts,
    shape: Option<Shape>,
) -> Result<OriginRequest, ProxyError> {
    let how = sending(exchange, shape);
    Ok(OriginRequest::new(
        parts,
        &how,
        exchange.route.operation,
        &exchange.settings.upstream,
    )?)
}

/// The same request, its headers built only when a whole set is needed (loadTable, whose hits
/// read a few of them).
pub fn outgoing(
    exchange: &Exchange<'_>,
    parts: http::request::Parts,
    shape: Option<Shape>,
) -> Result<Outgoing, ProxyError> {
    let how = sending(exchange, shape);
    Ok(Outgoing::new(
        parts,
        how,
        exchange.route.operation,
        &exchange.settings.upstream,
    )?)
}

fn sending(exchange: &Exchange<'_>, shape: Option<Shape>) -> Sending {
    Sending {
        peer: exchange.peer,
        proto: exchange.settings.scheme(),
        forwards_delegation: exchange.policy.credentials.forwards_delegation(),
        request_id: exchange.request_id.clone(),
        // An answer the policy stage must read comes in the identity encoding.
        identity_encoding: processes(shape, &exchange.policy),
    }
}

/// What a route's successful answer is, for the policy stage under `strip` and `inject`.
pub fn answer_shape(operation: Operation) -> Option<Shape> {
    use Operation::*;
    match operation {
        LoadTable | CreateTable | RegisterTable | LoadView | CreateView | ReplaceView
        | RegisterView => Some(Shape::Table),
        LoadCredentials => Some(Shape::Credentials),
        // Config has its own reader; every other answer is scrubbed: a catalog may put
        // credentials in a commit's answer, a scan plan, or an extension's.
        Config => None,
        _ => Some(Shape::Unknown),
    }
}
