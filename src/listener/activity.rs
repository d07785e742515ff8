//! When a connection is idle: no request in flight and nothing moving on it for the idle
//! timeout. A request is in flight from its arrival until the last piece of its answer is
//! handed to the protocol; the bytes still queued after that count as activity while they
//! move (an HTTP/1.1 keep-alive connection is idle from its last byte written, not from the
//! moment a 20 MB body was handed over whole). Bytes that wait to be written without moving
//! for the idle timeout are a client that stopped reading: its connection is cut (a graceful
//! close would wait on it for ever). Writes only show what leaves icecache: the watch asks the
//! kernel whether its queue for the client shrank (`kernel_queue`) before it takes any of
//! these marks as final. On HTTP/2 a client that grants no flow-control window leaves nothing
//! waiting on the socket: there an answer's piece that the protocol does not come back for
//! within the idle timeout (it takes the next one only once the window allows; it holds the
//! last one until the window takes some of it), while no write moves more than control
//! frames, is the same stalled client (a client that reads, but slower than the answer is
//! handed over, leaves pieces in the protocol's send buffer while the socket moves). On
//! HTTP/1.1 the bytes of the next request are activity; on HTTP/2 reads are not, since the
//! peer's answers to keep-alive pings would keep an unused connection open for ever, and
//! writes are activity only when they move more than control frames. On HTTP/1.1 the first
//! byte read while no request is in flight starts a request head, which must be whole within
//! the head-read timeout, whatever the idle timeout; a keep-alive connection that sends
//! nothing is only idle (hyper's own head timer also runs while a connection waits for its
//! next request, which closed idle keep-alive connections after the head-read timeout and
//! raced clients reusing them). Bytes of a next head may also come before an answer is over:
//! in the read that brought the request (pipelined), or while it is answered. They wait in
//! hyper's buffer, where no read shows them again, so a read that ends inside a head (not on
//! the blank line that ends one, nor with line breaks alone) behind a request without a body
//! starts the next head's clock when that request's answer is handed over.

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
use hyper::service::Service;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::wire::body::{Body, BoxError};

/// The largest piece of an answer handed to HTTP/1.1 at once: a body stays in flight until its
/// last piece is taken, and a piece is a cheap view of the same bytes.
const PIECE: usize = 256 * 1024;

/// The largest piece handed to HTTP/2, whose next piece is asked for only once the client's
/// window allows: a client granting at least this much per idle timeout is never taken for
/// stalled. HTTP/2's default initial window.
const H2_PIECE: usize = 64 * 1024;

/// The most an HTTP/2 write may move and still not count as answer bytes taken by the client:
/// a ping, its answer and a window update together (17 + 17 + 13 bytes), which a client that
/// grants no window still draws from the server.
const CONTROL_FRAMES: usize = 64;

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
    /// Whether the last read (HTTP/1.1) ended inside a head (see the module's comment).
    tail_open: AtomicBool,
    /// HTTP/2 answers with a piece handed over and the next not yet asked for, and when a piece
    /// was last handed over on this connection.
    parked: AtomicUsize,
    parked_ms: AtomicU64,
    /// When an HTTP/2 write last moved more than control frames: a parked answer whose
    /// client still takes bytes is waiting on the protocol's send buffer, not on the client.
    moved_ms: AtomicU64,
    /// Set when an answer has to wait (a hit never does), for the connection's watch.
    waits: AtomicBool,
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
            tail_open: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            parked_ms: AtomicU64::new(0),
            moved_ms: AtomicU64::new(0),
            waits: AtomicBool::new(false),
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

    /// An HTTP/2 answer's piece was handed over and more will be asked for when the window
    /// allows: the connection's client is reading from now, until it is asked.
    fn park(&self) {
        self.parked_ms.store(self.now_ms(), Ordering::Relaxed);
        self.parked.fetch_add(1, Ordering::AcqRel);
    }

    fn unpark(&self) {
        self.parked.fetch_sub(1, Ordering::AcqRel);
    }

    /// An HTTP/2 write moved answer bytes to the client: activity, and progress for a parked
    /// answer.
    fn moved(&self) {
        let now = self.now_ms();
        self.moved_ms.store(now, Ordering::Relaxed);
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// The connection's watch saw the client take bytes the kernel held for it: every mark
    /// moves to now, which it returns.
    pub fn progressed(&self) -> Instant {
        let now = self.now_ms();
        for mark in [&self.last_ms, &self.waiting_ms, &self.moved_ms] {
            mark.store(now, Ordering::Relaxed);
        }
        self.born + Duration::from_millis(now)
    }

    /// Since when the client has taken nothing, if something waits for it: bytes waiting to be
    /// written without moving, or HTTP/2 answers whose next piece has not been asked for.
    pub fn stalled_since(&self) -> Option<Instant> {
        let at = |ms: &AtomicU64| self.born + Duration::from_millis(ms.load(Ordering::Relaxed));
        let unsent = self
            .unsent
            .load(Ordering::Relaxed)
            .then(|| at(&self.waiting_ms));
        let parked = (self.parked.load(Ordering::Acquire) > 0)
            .then(|| at(&self.parked_ms).max(at(&self.moved_ms)));
        match (unsent, parked) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Bytes were read: with no request in flight, they begin the next request's head.
    /// `ends_open`: whether they end inside a head (`ends_inside_a_head`).
    pub(super) fn read(&self, ends_open: bool) {
        self.tail_open.store(ends_open, Ordering::Relaxed);
        // One reading of the clock for both marks: a hit reads the clock few enough times.
        let now = self.now_ms();
        self.last_ms.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) == 0
            && !self.head_started.swap(true, Ordering::AcqRel)
        {
            self.head_ms.store(now, Ordering::Relaxed);
        }
    }

    /// Whether a request is in flight: arrived, and its answer not yet wholly handed over.
    pub fn answering(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    /// Whether an answer on this connection has had to wait since this was last asked. Over
    /// HTTP/1.1 an answer is polled within the connection's own task, so a watch that asks
    /// right after polling the connection learns of it in the same pass, with no wake needed.
    pub fn an_answer_waited(&self) -> bool {
        self.waits.load(Ordering::Relaxed) && self.waits.swap(false, Ordering::Relaxed)
    }

    /// Since when a request head has been arriving without being whole, if one is.
    pub fn head_since(&self) -> Option<Instant> {
        (self.head_started.load(Ordering::Acquire) && self.in_flight.load(Ordering::Acquire) == 0)
            .then(|| self.born + Duration::from_millis(self.head_ms.load(Ordering::Relaxed)))
    }

    /// Since when nothing has happened on the connection, or None while a request runs.
    pub fn quiet_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::Acquire) == 0)
            .then(|| self.born + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }

    /// When the connection falls idle if nothing happens, or None while a request runs.
    pub fn idle_at(&self, idle: Duration) -> Option<Instant> {
        self.quiet_since().map(|since| since + idle)
    }
}

/// Whether bytes read end inside a request head: not on the blank line that ends one, and not
/// line breaks alone (an empty line before a request line is ignored).
pub(super) fn ends_inside_a_head(bytes: &[u8]) -> bool {
    // The usual read, a whole head, is told by its last four bytes.
    let blank_line =
        bytes.ends_with(b"\r\n\r\n") || bytes.ends_with(b"\n\n") || bytes.ends_with(b"\n\r\n");
    !blank_line && !bytes.iter().all(|b| matches!(b, b'\r' | b'\n'))
}

/// Counts a request in flight from its arrival until its answer is handed over or dropped.
struct InFlight {
    activity: Arc<Activity>,
    /// Whether the request has no body: bytes read after its head begin the next one.
    bodiless: bool,
}

impl InFlight {
    fn start(activity: &Arc<Activity>, bodiless: bool) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        // The head is whole: the next one starts with the next byte read after this answer,
        // or with this answer, if bytes of it were read already (see the module's comment).
        activity.head_started.store(false, Ordering::Release);
        InFlight {
            activity: activity.clone(),
            bodiless,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.activity;
        let now = activity.now_ms();
        activity.last_ms.store(now, Ordering::Relaxed);
        if self.bodiless && activity.tail_open.load(Ordering::Relaxed) {
            // Part of the next head waits in hyper's buffer: its clock runs from now.
            activity.head_ms.store(now, Ordering::Relaxed);
            activity.head_started.store(true, Ordering::Release);
        }
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body handed over in pieces, keeping its request in flight until the last one
/// is taken.
pub struct Tracked {
    body: Body,
    /// What is left of a data frame larger than a piece.
    rest: Option<Bytes>,
    in_flight: Option<InFlight>,
    /// Whether it goes out on HTTP/2: smaller pieces, each parked until the next is asked for
    /// (see `Activity`).
    h2: bool,
    parked: bool,
}

impl Tracked {
    fn new(body: Body, in_flight: Option<InFlight>, h2: bool) -> Self {
        Tracked {
            body,
            rest: None,
            in_flight,
            h2,
            parked: false,
        }
    }

    fn unpark(&mut self) {
        if std::mem::take(&mut self.parked) {
            if let Some(in_flight) = &self.in_flight {
                in_flight.activity.unpark();
            }
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.unpark();
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // Asked again: the client took what it was given.
        self.unpark();
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
        let piece = if self.h2 { H2_PIECE } else { PIECE };
        if data.len() > piece {
            self.rest = Some(data.split_off(piece));
        }
        // On HTTP/2 every piece waits for the window, the last one too: the protocol holds it,
        // and the body with it, until the client's window takes some of it.
        if self.h2 {
            if let Some(in_flight) = &self.in_flight {
                in_flight.activity.park();
                self.parked = true;
            }
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
pub struct Counted<S> {
    inner: S,
    activity: Arc<Activity>,
    h2: bool,
}

impl<S> Counted<S> {
    /// `h2`: whether the connection speaks HTTP/2 (its answers go in parking pieces).
    pub fn new(inner: S, activity: Arc<Activity>, h2: bool) -> Self {
        Counted {
            inner,
            activity,
            h2,
        }
    }
}

impl<S> Service<Request<Incoming>> for Counted<S>
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = Answering<S::Future>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(
            &self.activity,
            http_body::Body::is_end_stream(request.body()),
        );
        Answering {
            answer: self.inner.call(request),
            in_flight: Some(in_flight),
            h2: self.h2,
            told: false,
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
        h2: bool,
        // Whether the connection's watch was told this answer waits.
        told: bool,
    }
}

impl<F> Future for Answering<F>
where
    F: Future<Output = Result<Response<Body>, Infallible>>,
{
    type Output = Result<Response<Tracked>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Poll::Ready(Ok(response)) = this.answer.poll(cx) else {
            // The first time it waits, the connection's watch is told (a hit never waits).
            if let Some(in_flight) = this.in_flight.as_ref().filter(|_| !*this.told) {
                in_flight.activity.waits.store(true, Ordering::Relaxed);
                *this.told = true;
            }
            return Poll::Pending;
        };
        let (in_flight, h2) = (this.in_flight.take(), *this.h2);
        Poll::Ready(Ok(response.map(|body| Tracked::new(body, in_flight, h2))))
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
        // HTTP/2 only (reads are not activity there): more than a few control frames moved.
        if let Poll::Ready(Ok(n)) = result {
            if !self.reads_count && *n > CONTROL_FRAMES {
                self.activity.moved();
            }
        }
        match *result {
            Poll::Ready(Ok(n)) if n < asked => self.activity.waiting(n > 0),
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
            self.activity
                .read(ends_inside_a_head(&buf.filled()[before..]));
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use std::task::Waker;

    fn tracked(activity: &Arc<Activity>, bytes: usize, h2: bool) -> Tracked {
        let body = crate::wire::body::full(vec![b'x'; bytes]);
        Tracked::new(body, Some(InFlight::start(activity, true)), h2)
    }

    fn take_piece(body: &mut Tracked) -> usize {
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => frame.into_data().map_or(0, |d| d.len()),
            other => panic!("no piece: {:?}", other.is_ready()),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_answer_whose_next_piece_is_not_asked_for_is_stalled_from_its_last_piece() {
        let activity = Activity::new();
        let mut body = tracked(&activity, 3 * H2_PIECE, true);
        assert_eq!(take_piece(&mut body), H2_PIECE);
        let handed = Instant::now();
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(activity.stalled_since(), Some(handed));
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_answer_asked_for_again_is_not_stalled_until_its_next_piece_waits() {
        let activity = Activity::new();
        let mut body = tracked(&activity, 3 * H2_PIECE, true);
        take_piece(&mut body);
        tokio::time::advance(Duration::from_secs(5)).await;
        take_piece(&mut body);
        assert_eq!(activity.stalled_since(), Some(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_piece_of_an_http2_answer_waits_for_the_window_until_the_answer_is_dropped() {
        // hyper holds the last piece, and the body, until the window takes some of it.
        let activity = Activity::new();
        let mut body = tracked(&activity, H2_PIECE + 1, true);
        take_piece(&mut body);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(take_piece(&mut body), 1);
        assert_eq!(activity.stalled_since(), Some(Instant::now()));
        drop(body);
        assert_eq!(activity.stalled_since(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_http2_answer_leaves_nothing_stalled() {
        let activity = Activity::new();
        let mut dropped = tracked(&activity, 2 * H2_PIECE, true);
        take_piece(&mut dropped);
        drop(dropped);
        assert_eq!(activity.stalled_since(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_parked_http2_answer_whose_client_still_takes_bytes_is_stalled_from_the_last_bytes() {
        let activity = Activity::new();
        let mut body = tracked(&activity, 3 * H2_PIECE, true);
        take_piece(&mut body);
        tokio::time::advance(Duration::from_secs(5)).await;
        let watched = Watched::new((), activity.clone(), false);
        watched.wrote(&Poll::Ready(Ok(16 * 1024)), 16 * 1024);
        let moved = Instant::now();
        tokio::time::advance(Duration::from_secs(5)).await;
        // Control frames alone are not the client taking the answer.
        watched.wrote(&Poll::Ready(Ok(CONTROL_FRAMES)), CONTROL_FRAMES);
        assert_eq!(activity.stalled_since(), Some(moved));
    }

    #[test]
    fn a_read_ends_inside_a_head_unless_it_ends_on_a_blank_line_or_is_line_breaks_alone() {
        let whole = b"GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n";
        assert!(!ends_inside_a_head(whole));
        assert!(!ends_inside_a_head(b"GET / HTTP/1.1\nHost: x\n\n"));
        assert!(!ends_inside_a_head(b"\r\n"));
        assert!(!ends_inside_a_head(&[whole.as_slice(), b"\r\n"].concat()));
        assert!(ends_inside_a_head(
            &[whole.as_slice(), b"GET /v1/con"].concat()
        ));
        assert!(ends_inside_a_head(
            &[whole.as_slice(), b"GET / HTTP/1.1\r\n"].concat()
        ));
        assert!(ends_inside_a_head(b"G"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_head_read_with_a_request_begins_when_that_answer_is_handed_over() {
        let activity = Activity::new();
        // A request head read whole, and the part of the next one read with it (pipelined).
        activity.read(true);
        let body = tracked(&activity, 10, false);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(activity.head_since(), None, "the answer is not over");
        drop(body);
        assert_eq!(activity.head_since(), Some(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_read_alone_leaves_its_connection_only_idle_after_its_answer() {
        let activity = Activity::new();
        activity.read(false);
        drop(tracked(&activity, 10, false));
        assert_eq!(activity.head_since(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_after_a_request_with_a_body_begin_no_head() {
        // They may be its body's: only a read with no request in flight begins a head then.
        let activity = Activity::new();
        activity.read(true);
        let body = Tracked::new(
            crate::wire::body::full(vec![b'x'; 10]),
            Some(InFlight::start(&activity, false)),
            false,
        );
        drop(body);
        assert_eq!(activity.head_since(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_http1_answer_is_stalled_only_by_bytes_that_wait_on_the_socket() {
        // HTTP/1.1 asks for the next piece once the last is written: a slow reader's piece
        // waits on the socket, where each write that moves keeps it from being stalled.
        let activity = Activity::new();
        let mut body = tracked(&activity, 3 * PIECE, false);
        assert_eq!(take_piece(&mut body), PIECE);
        assert_eq!(activity.stalled_since(), None);
    }
}
