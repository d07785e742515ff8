//! The one body type that flows through icecache, and the one way a body is read whole: with a
//! byte bound and a time bound (tower-http's `TimeoutBody` resets on every frame, so a slow but
//! moving body is fine and a stalled one is cut).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full, Limited};
use thiserror::Error;
use tower_http::timeout::TimeoutBody;

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

/// A body of a few pieces, sent in order without joining them.
pub fn pieces(pieces: Vec<Bytes>) -> Body {
    if let [one] = &pieces[..] {
        return full(one.clone());
    }
    let frames = futures::stream::iter(
        pieces
            .into_iter()
            .filter(|piece| !piece.is_empty())
            .map(|piece| Ok(http_body::Frame::data(piece))),
    );
    http_body_util::StreamBody::new(frames).boxed()
}

/// Streams a peer's body on, failing it when no frame comes for `idle`: a peer that sends its
/// head and then stalls cannot hold a connection forever. The length the peer announced goes
/// on with it (see `Announced`).
pub fn stream<B>(body: B, idle: Duration) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    let length = body.size_hint();
    Announced {
        inner: Box::pin(TimeoutBody::new(idle, body)),
        length,
    }
    .map_err(Into::into)
    .boxed()
}

/// A body that still says the length its source announced. `TimeoutBody` does not pass it on,
/// and a body of unknown length is sent chunked: a DELETE without a body, or a POST with a
/// `Content-Length`, reached the catalog as `Transfer-Encoding: chunked`, which not every
/// catalog reads. HTTP clients read the length once, before the first frame.
struct Announced<B> {
    inner: Pin<Box<B>>,
    length: SizeHint,
}

impl<B: http_body::Body> http_body::Body for Announced<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.get_mut().inner.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.length.exact() == Some(0) || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.length
    }
}

#[derive(Debug, Error)]
pub enum ReadError {
    #[error("the body is longer than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("nothing arrived for {0:?} in the middle of the body")]
    Stalled(Duration),
    #[error("the body broke off")]
    Broken(#[source] BoxError),
}

/// Reads a body whole, at most `limit` bytes, with at most `idle` between frames. The bytes are
/// copied into a buffer of exactly their length: a small body read here never keeps a large
/// read buffer alive.
/// `read_to_bytes` for icecache's own body type, as a boxed future: the generic one, awaited
/// inside a future that must be `Send` for every lifetime, trips the compiler's higher-ranked
/// `From` check on `BoxError`.
pub fn read_body(
    body: Body,
    limit: usize,
    idle: Duration,
) -> futures::future::BoxFuture<'static, Result<Bytes, ReadError>> {
    Box::pin(read_to_bytes(body, limit, idle))
}

pub async fn read_to_bytes<B>(body: B, limit: usize, idle: Duration) -> Result<Bytes, ReadError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    if body.size_hint().lower() > limit as u64 {
        return Err(ReadError::TooLarge { limit });
    }
    let collected = Limited::new(TimeoutBody::new(idle, body), limit)
        .collect()
        .await
        .map_err(|e| classify(e, limit, idle))?;
    let mut buffer = collected.aggregate();
    let mut exact = Vec::with_capacity(bytes::Buf::remaining(&buffer));
    while bytes::Buf::has_remaining(&buffer) {
        let chunk = bytes::Buf::chunk(&buffer);
        exact.extend_from_slice(chunk);
        let n = chunk.len();
        bytes::Buf::advance(&mut buffer, n);
    }
    Ok(Bytes::from(exact))
}

fn classify(error: BoxError, limit: usize, idle: Duration) -> ReadError {
    if error.is::<http_body_util::LengthLimitError>() {
        return ReadError::TooLarge { limit };
    }
    if error.is::<tower_http::timeout::TimeoutError>() {
        return ReadError::Stalled(idle);
    }
    ReadError::Broken(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    #[tokio::test]
    async fn a_streamed_body_announces_its_length_and_still_arrives_whole() {
        let idle = Duration::from_secs(1);
        let body = stream(Full::new(Bytes::from_static(b"abc")), idle);
        assert_eq!(body.size_hint().exact(), Some(3));
        assert!(!body.is_end_stream());
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"abc");
        let nothing = stream(Empty::<Bytes>::new(), idle);
        assert!(nothing.is_end_stream());
        assert_eq!(nothing.size_hint().exact(), Some(0));
    }

    #[tokio::test]
    async fn a_body_of_unknown_length_is_streamed_as_one() {
        let frames = futures::stream::iter([Ok::<_, std::convert::Infallible>(Frame::data(
            Bytes::from_static(b"ab"),
        ))]);
        let body = stream(
            http_body_util::StreamBody::new(frames),
            Duration::from_secs(1),
        );
        assert_eq!(body.size_hint().exact(), None);
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"ab");
    }

    #[tokio::test]
    async fn a_body_within_the_bound_is_read_whole() {
        let read = read_to_bytes(
            Full::new(Bytes::from_static(b"abc")),
            3,
            Duration::from_secs(1),
        )
        .await;
        assert_eq!(&read.unwrap()[..], b"abc");
    }

    #[tokio::test]
    async fn a_body_over_the_bound_is_refused() {
        let read = read_to_bytes(
            Full::new(Bytes::from_static(b"abcd")),
            3,
            Duration::from_secs(1),
        )
        .await;
        assert!(matches!(read, Err(ReadError::TooLarge { limit: 3 })));
    }

    #[tokio::test]
    async fn a_stalled_body_is_cut() {
        use futures::StreamExt;
        let first = futures::stream::iter([Ok::<_, BoxError>(http_body::Frame::data(
            Bytes::from_static(b"a"),
        ))]);
        let body = http_body_util::StreamBody::new(first.chain(futures::stream::pending()));
        let read = read_to_bytes(body, 10, Duration::from_millis(50)).await;
        assert!(matches!(read, Err(ReadError::Stalled(_))), "{read:?}");
    }
}
