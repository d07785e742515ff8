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

/// Streams a peer's body on, failing it when no frame comes for `idle`: a catalog that sends
/// its response head and then stalls cannot hold a client's connection forever.
pub fn stream_with_idle_timeout(
    incoming: hyper::body::Incoming,
    idle: std::time::Duration,
) -> Body {
    let frames = futures::stream::unfold(Some(incoming), move |state| async move {
        let mut incoming = state?;
        match tokio::time::timeout(idle, incoming.frame()).await {
            Ok(Some(Ok(frame))) => Some((Ok(frame), Some(incoming))),
            Ok(Some(Err(e))) => Some((Err(BoxError::from(e)), None)),
            Ok(None) => None,
            Err(_) => Some((
                Err(BoxError::from(format!(
                    "the catalog sent nothing for {idle:?} in the middle of a response body"
                ))),
                None,
            )),
        }
    });
    http_body_util::StreamBody::new(frames).boxed()
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
