//! When a connection is idle: no request in flight and nothing moving on it for the idle
//! timeout. A request is in flight from its arrival until the last piece of its answer is
//! handed to the protocol; the bytes still queued after that count as activity while they
//! move (an HTTP/1.1 keep-alive connection is idle from its last byte written, not from the
//! moment a 20 MB body was handed over whole). Bytes that wait to be written without moving
//! for the idle timeout are a client that stopped reading: its connection is cut (a graceful
//! close would wait on it for ever). On HTTP/1.1 the bytes of the next request are activity;
//! on HTTP/2 reads are not, since the peer's answers to keep-alive pings would keep an unused
//! connection open for ever. On HTTP/1.1 the first byte read while no request is in flight
//! starts a request head, which must be whole within the head-read timeout; a keep-alive
//! connection that sends nothing is only idle (hyper's own head timer also runs while a
//! connection waits for its next request, which closed idle keep-alive connections after the
//! head-read timeout and raced clients reusing them).

use std::convert::Infallible;
use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tower::Service;

use crate::wire::body::{Body, BoxError};

/// The largest piece of an answer handed to the protocol at once: a body stays in flight until
/// its last piece is taken, and a piece is a cheap view of the same bytes.
const PIECE: usize = 256 * 1024;

/// Requests in flight on one connection, and when something last happened on it.
pub struct Activity {
    born: Instant,
    in_flight: AtomicUsize,
    last_ms: AtomicU64,
    /// Whether some bytes are waiting to be written, and since when they have not moved.
    unsent: AtomicBool,
    waiting_ms: AtomicU64,
    /// Whether a request head has begun arriving (HTTP/1.1), and since when.
    head_started: AtomicBool,
    head_ms: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            unsent: AtomicBool::new(false),
            waiting_ms: AtomicU64::new(0),
            head_started: AtomicBool::new(false),
            head_ms: AtomicU64::new(0),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Some bytes could not be written (`moved`: some others were): they wait from now.
    fn waiting(&self, moved: bool) {
        let already = self.unsent.swap(true, Ordering::Relaxed);
        if moved || !already {
            let now = self.now_ms();
            self.waiting_ms.store(now, Ordering::Relaxed);
            if moved {
                self.last_ms.store(now, Ordering::Relaxed);
            }
        }
    }

    /// Everything handed to the connection has been written.
    fn written(&self) {
        if self.unsent.swap(false, Ordering::Relaxed) {
            self.touch();
        }
    }

    /// Since when bytes have waited to be written without moving, if some are waiting.
    pub fn stalled_since(&self) -> Option<Instant> {
        self.unsent
            .load(Ordering::Relaxed)
            .then(|| self.born + Duration::from_millis(self.waiting_ms.load(Ordering::Relaxed)))
    }

    /// Bytes were read: with no request in flight, they begin the next request's head.
    pub(super) fn read(&self) {
        // One reading of the clock for both marks: a hit reads the clock few enough times.
        let now = self.now_ms();
        self.last_ms.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) == 0
            && !self.head_started.swap(true, Ordering::AcqRel)
        {
            self.head_ms.store(now, Ordering::Relaxed);
        }
    }

    /// Since when a request head has been arriving without being whole, if one is.
    pub fn head_since(&self) -> Option<Instant> {
        (self.head_started.load(Ordering::Acquire) && self.in_flight.load(Ordering::Acquire) == 0)
            .then(|| self.born + Duration::from_millis(self.head_ms.load(Ordering::Relaxed)))
    }

    /// When the connection falls idle if nothing happens, or None while a request runs.
    pub fn idle_at(&self, idle: Duration) -> Option<Instant> {
        (self.in_flight.load(Ordering::Acquire) == 0)
            .then(|| self.born + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + idle)
    }
}

/// Counts a request in flight from its arrival until its answer is handed over or dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        // The head is whole: the next one starts with the next byte read after this answer.
        activity.head_started.store(false, Ordering::Release);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body handed over in pieces of at most `PIECE`, keeping its request in flight
/// until the last one is taken.
pub struct Tracked {
    body: Body,
    /// What is left of a data frame larger than a piece.
    rest: Option<Bytes>,
    _in_flight: Option<InFlight>,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut data = match self.rest.take() {
            Some(rest) => rest,
            None => match std::task::ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return Poll::Ready(other),
            },
        };
        if data.len() > PIECE {
            self.rest = Some(data.split_off(PIECE));
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let held = self.rest.as_ref().map_or(0, |r| r.len() as u64);
        let inner = self.body.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + held);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}

/// The connection's service, counting what is in flight.
#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Counted<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> Self {
        Counted { inner, activity }
    }
}

impl<S> Service<Request<Incoming>> for Counted<S>
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = Answering<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(&self.activity);
        Answering {
            answer: self.inner.call(request),
            in_flight: Some(in_flight),
        }
    }
}

pin_project_lite::pin_project! {
    /// A request being answered, counted in flight, and then its body. Not boxed: hyper keeps
    /// each connection's answer in flight in a place of its own.
    pub struct Answering<F> {
        #[pin]
        answer: F,
        in_flight: Option<InFlight>,
    }
}

impl<F> Future for Answering<F>
where
    F: Future<Output = Result<Response<Body>, Infallible>>,
{
    type Output = Result<Response<Tracked>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(response) = std::task::ready!(this.answer.poll(cx));
        let in_flight = this.in_flight.take();
        Poll::Ready(Ok(response.map(|body| Tracked {
            body,
            rest: None,
            _in_flight: in_flight,
        })))
    }
}

/// A connection's I/O, noting what moves on it. Bytes the protocol could not write at once are
/// unsent; each write that moves some of them, and the one that empties them, is activity, and
/// unsent bytes that do not move for the idle timeout are a stalled client.
pub struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
    reads_count: bool,
}

impl<I> Watched<I> {
    /// `reads_count`: whether bytes read are activity (HTTP/1.1), or only writes (HTTP/2).
    pub fn new(io: I, activity: Arc<Activity>, reads_count: bool) -> Self {
        Watched {
            io,
            activity,
            reads_count,
        }
    }

    fn wrote(&self, result: &Poll<std::io::Result<usize>>, asked: usize) {
        match result {
            Poll::Ready(Ok(n)) if *n < asked => self.activity.waiting(*n > 0),
            Poll::Ready(Ok(_)) => self.activity.written(),
            Poll::Pending => self.activity.waiting(false),
            Poll::Ready(Err(_)) => {}
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.io).poll_read(cx, buf);
        if self.reads_count && buf.filled().len() > before {
            self.activity.read();
        }
        result
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(&result, buf.len());
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote(&result, bufs.iter().map(|b| b.len()).sum());
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
