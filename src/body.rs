//! The one body type that flows through icecache: streamed from a peer or built from bytes.

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Body = BoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// Streams a hyper body on without buffering it.
pub fn stream(incoming: hyper::body::Incoming) -> Body {
    incoming.map_err(BoxError::from).boxed()
}

/// A body of a few pieces, sent in order without joining them.
pub fn chain<const N: usize>(pieces: [Bytes; N]) -> Body {
    let frames = futures::stream::iter(
        pieces
            .into_iter()
            .filter(|piece| !piece.is_empty())
            .map(|piece| Ok(http_body::Frame::data(piece))),
    );
    http_body_util::StreamBody::new(frames).boxed()
}
