//! Accepting connections: HTTP/1.1 and HTTP/2 (prior knowledge, or ALPN under TLS) on one
//! port, bounded request heads and head-read time, a connection limit, idle connections closed
//! (HTTP/2 ones also pinged, so a vanished peer is noticed), and a graceful stop.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, Interest};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::activity::{Activity, Counted, Watched};
use super::corked::Corked;
use super::kernel_queue::KernelQueue;
use super::lingering::Lingering;
use super::wake_gate::WakeGate;
use crate::wire::body::Body;

/// Connection limits of one listener.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_header_bytes: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
}

/// How often an HTTP/2 connection is pinged, and how long a ping may go unanswered.
const H2_KEEPALIVE: Duration = Duration::from_secs(20);

/// The two protocol builders, configured once per listener.
struct Protocols {
    http1: hyper::server::conn::http1::Builder,
    http2: hyper::server::conn::http2::Builder<TokioExecutor>,
}

impl Protocols {
    fn new(limits: &Limits) -> Self {
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            // Bounded in `watch_connection` from a head's first byte: hyper's timer also runs
            // while a keep-alive connection waits, which would close it before `idle_timeout`.
            .header_read_timeout(None)
            .max_header_size(limits.max_header_bytes)
            // `ETag` is written as `ETag` from the case map set on each response (see
            // `header_case`), which hyper's encoder reads whatever this says; preserving the
            // case of request headers would record a case map for every request, unread.
            .preserve_header_case(false)
            // A client's end of stream means it left (its request is abandoned, counted 499),
            // as nginx takes it: half-closing clients are rare, ones that time out are not.
            .half_close(false)
            .keep_alive(true);
        let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .keep_alive_interval(H2_KEEPALIVE)
            .keep_alive_timeout(H2_KEEPALIVE)
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
        Protocols { http1, http2 }
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a plain connection speaks HTTP/2 (prior knowledge), from its first bytes, without
/// consuming them. None when the client closed or sent nothing in time: a connection that
/// never speaks must not hold a slot.
async fn speaks_h2(stream: &TcpStream, deadline: Duration) -> Option<bool> {
    let detect = async {
        let mut seen = [0u8; 24];
        let mut pause = Duration::from_millis(5);
        loop {
            let ready = stream.ready(Interest::READABLE).await.ok()?;
            let n = stream.peek(&mut seen).await.ok()?;
            if n == 0 {
                return None;
            }
            if seen[..n] != H2_PREFACE[..n] {
                return Some(false);
            }
            if n == H2_PREFACE.len() {
                return Some(true);
            }
            // Part of a preface, and the client has closed: the rest will never come (the bytes
            // left unread keep the socket readable, so only this says so).
            if ready.is_read_closed() {
                return None;
            }
            // A preface split across packets: the bytes stay readable, so wait a little, and
            // longer each time, for a client that sends it a byte at a time.
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    };
    tokio::time::timeout(deadline, detect).await.ok().flatten()
}

/// Serves the services `make_service` builds (one per connection, for its peer) on `listener`
/// until `shutdown` turns true, then lets in-flight requests finish for up to
/// `limits.shutdown_grace`.
pub async fn serve<M, S>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    make_service: M,
) where
    M: Fn(SocketAddr) -> S,
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let protocols = Arc::new(Protocols::new(&limits));
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = stopped(&mut shutdown) => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut shutdown) => break,
        };
        let _ = stream.set_nodelay(true);
        let service = make_service(peer);
        let (protocols, tls, limits, shutdown) = (
            protocols.clone(),
            tls.clone(),
            limits.clone(),
            shutdown.clone(),
        );
        tokio::spawn(async move {
            // A connection that says nothing is idle from the start.
            let deadline = limits.header_read_timeout.min(limits.idle_timeout);
            // For the watch's questions to the kernel; open while the connection is served.
            let fd = Some(stream.as_raw_fd());
            let result = match tls {
                None => match speaks_h2(&stream, deadline).await {
                    Some(h2) => {
                        let stream = Lingering::new(stream, permit);
                        serve_io(&protocols, &limits, shutdown, stream, fd, h2, service).await
                    }
                    None => return,
                },
                Some(acceptor) => {
                    let stream = Lingering::new(stream, permit);
                    // The handshake is bounded like a request head.
                    let stream = match tokio::time::timeout(deadline, acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(peer = %peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                        // HTTP/1.1 writes an answer whole before it flushes; h2 flushes after
                        // every frame.
                        let stream = Corked::new(stream);
                        serve_io(&protocols, &limits, shutdown, stream, fd, true, service).await
                    } else {
                        serve_io(&protocols, &limits, shutdown, stream, fd, false, service).await
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    // Every connection holds a permit until it closes (a lingering one until its client has
    // read what it was sent): all of them back means all closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(limits.shutdown_grace, permits.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            grace = ?limits.shutdown_grace,
            "connections still open after the shutdown grace period (requests in flight, or \
             clients still reading a closed connection's last answer); closing them"
        );
    }
}

async fn serve_io<I, S>(
    protocols: &Protocols,
    limits: &Limits,
    mut shutdown: watch::Receiver<bool>,
    io: I,
    fd: Option<RawFd>,
    h2: bool,
    service: S,
) -> Result<(), hyper::Error>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let activity = Activity::new();
    let service = Counted::new(service, activity.clone(), h2);
    let io = TokioIo::new(Watched::new(io, activity.clone(), !h2));
    if h2 {
        let connection = protocols.http2.serve_connection(io, service);
        tokio::pin!(connection);
        let watched = Watch { fd, http1: false };
        watch_connection(connection, limits, &mut shutdown, &activity, watched, |c| {
            c.graceful_shutdown();
        })
        .await
    } else {
        let connection = protocols.http1.serve_connection(io, service);
        tokio::pin!(connection);
        let watched = Watch { fd, http1: true };
        watch_connection(connection, limits, &mut shutdown, &activity, watched, |c| {
            c.graceful_shutdown();
        })
        .await
    }
}

/// Drives a connection to its end, asking it to close gracefully once it has been idle for
/// `idle_timeout` or when the listener stops, and cutting it when a request head takes longer
/// than `header_read_timeout` from its first byte (HTTP/1.1), when its client takes nothing of
/// a waiting answer for `idle_timeout`, or when, closing with no request in flight and nothing
/// moving, it has not ended `idle_timeout` after it was asked to (an HTTP/2 stream's last bytes
/// held by a window the client never opens).
///
/// Nothing on a request's path wakes this watch: it sleeps until the earliest deadline it knows
/// of, and never longer than `header_read_timeout`, so a head that began while it slept is
/// seen before that head's own deadline (it began after the sleep did) and its deadline is then
/// slept to exactly. A busy connection costs one timer wake per `header_read_timeout`.
async fn watch_connection<C>(
    mut connection: Pin<&mut C>,
    limits: &Limits,
    shutdown: &mut watch::Receiver<bool>,
    activity: &Activity,
    watched: Watch,
    close: impl Fn(Pin<&mut C>),
) -> Result<(), hyper::Error>
where
    C: std::future::Future<Output = Result<(), hyper::Error>>,
{
    let mut closing: Option<Instant> = None;
    let mut queue = KernelQueue::new(watched.fd);
    let idle = limits.idle_timeout;
    let head_read = limits.header_read_timeout;
    let wake = |closing, now| {
        let wake = next_wake(activity, limits, closing, now);
        // While a request is answered, HTTP/1.1 may hold bytes its client sent after the head
        // and read no further: the kernel is asked whether the client left, every second.
        match watched.http1 && activity.answering() {
            true => wake.min(now + LEFT_CHECK),
            false => wake,
        }
    };
    let sleep = tokio::time::sleep_until(wake(closing, Instant::now()));
    tokio::pin!(sleep);
    let stop = stopped(shutdown);
    tokio::pin!(stop);
    // The stop signal and the timer are polled only when they woke (see `wake_gate`).
    let mut gate = WakeGate::new();
    loop {
        let turn = std::future::poll_fn(|cx| {
            // The connection first: it is what a wake is almost always for.
            if let Poll::Ready(result) = connection.as_mut().poll(cx) {
                return Poll::Ready(Turn::Ended(result));
            }
            // An answer that waits: time to look at the client while it does (below). Asked
            // right after the connection, which is where an HTTP/1.1 answer says it waits.
            if watched.http1 && activity.an_answer_waited() {
                return Poll::Ready(Turn::AnswerWaits);
            }
            if gate.passes(cx) {
                let mut inner = gate.inner();
                if closing.is_none() && stop.as_mut().poll(&mut inner).is_ready() {
                    return Poll::Ready(Turn::Stop);
                }
                if sleep.as_mut().poll(&mut inner).is_ready() {
                    return Poll::Ready(Turn::Slept);
                }
            }
            Poll::Pending
        })
        .await;
        match turn {
            Turn::Ended(result) => return result,
            Turn::AnswerWaits => {}
            Turn::Stop => {
                closing = Some(Instant::now());
                close(connection.as_mut());
            }
            Turn::Slept => {
                if watched.http1 && activity.answering() && queue.client_left() {
                    // Dropping the connection drops what it answers: counted as abandoned.
                    tracing::debug!(
                        "the client left while its request was answered; connection cut"
                    );
                    return Ok(());
                }
                let now = Instant::now();
                match due(activity, limits, closing, now) {
                    Due::Nothing => {}
                    Due::HeadTooLong => {
                        // A request head still not whole: a slow client holds nothing for long.
                        tracing::debug!(?head_read, "a request head took too long; connection cut");
                        return Ok(());
                    }
                    // The kernel still drains what icecache wrote: the client reads.
                    Due::Stalled(mark) | Due::ClosingHeld(mark) | Due::Idle(mark)
                        if queue.moved_since(mark) =>
                    {
                        queue.rebase(activity.progressed());
                    }
                    Due::Stalled(_) => {
                        // The client has read nothing for the idle timeout: a graceful close
                        // would wait on it for ever, so the connection is dropped.
                        tracing::debug!(?idle, "a client stopped reading; connection cut");
                        return Ok(());
                    }
                    Due::ClosingHeld(_) => {
                        tracing::debug!(?idle, "a closing connection did not end; connection cut");
                        return Ok(());
                    }
                    Due::Idle(_) => {
                        closing = Some(now);
                        close(connection.as_mut());
                    }
                }
            }
        }
        sleep.as_mut().reset(wake(closing, Instant::now()));
        // The timer moved, and a turn that ended early polled only part of what is gated:
        // all of it is polled on the next turn.
        gate.open();
    }
}

/// Why a connection's watch woke.
enum Turn {
    /// The connection ended.
    Ended(Result<(), hyper::Error>),
    /// An answer has to wait.
    AnswerWaits,
    /// The listener stops.
    Stop,
    /// The earliest deadline the watch knew of came.
    Slept,
}

/// What a connection's watch may ask the kernel about it.
struct Watch {
    /// The connection's TCP socket (see `KernelQueue`).
    fd: Option<RawFd>,
    /// Whether it speaks HTTP/1.1 (an HTTP/2 connection reads on, and sees its client leave).
    http1: bool,
}

/// How often the watch of an HTTP/1.1 connection answering a request asks whether its client
/// left (a wake per second per such connection; a hit is answered before the watch wakes).
const LEFT_CHECK: Duration = Duration::from_secs(1);

/// What a connection's watch finds due when it wakes; the marks are when the client was last
/// known to take something (the kernel is asked about them before anything is cut or closed).
#[derive(Debug, PartialEq)]
enum Due {
    Nothing,
    /// A request head not whole `header_read_timeout` after its first byte.
    HeadTooLong,
    /// Bytes waiting to be written, or an HTTP/2 answer's piece, not taken for `idle_timeout`.
    Stalled(Instant),
    /// Closing, asked `idle_timeout` ago, with nothing in flight and nothing moving since.
    ClosingHeld(Instant),
    /// No request in flight, no head begun and nothing moving for `idle_timeout`.
    Idle(Instant),
}

/// The decision alone, in that order: a head's deadline, a stall, a close that did not end, an
/// idle connection. A head begun holds off the idle close: its own deadline bounds it.
fn due(activity: &Activity, limits: &Limits, closing: Option<Instant>, now: Instant) -> Due {
    let idle = limits.idle_timeout;
    let head = activity.head_since();
    if head.is_some_and(|since| since + limits.header_read_timeout <= now) {
        return Due::HeadTooLong;
    }
    if let Some(since) = activity.stalled_since().filter(|s| *s + idle <= now) {
        return Due::Stalled(since);
    }
    let quiet = activity.quiet_since().filter(|since| *since + idle <= now);
    match (closing, quiet) {
        (Some(asked), Some(since)) if asked + idle <= now => Due::ClosingHeld(since),
        (None, Some(since)) if head.is_none() => Due::Idle(since),
        _ => Due::Nothing,
    }
}

/// When the watch of a connection next looks at it: the earliest of its idle (or, closing, its
/// close's), stall and head deadlines, and at most `header_read_timeout` from `now` (see
/// `watch_connection`).
fn next_wake(
    activity: &Activity,
    limits: &Limits,
    closing: Option<Instant>,
    now: Instant,
) -> Instant {
    let idle = limits.idle_timeout;
    let idle_at = match closing {
        // A head begun is bounded by its own deadline, below.
        None if activity.head_since().is_some() => now + idle,
        None => activity.idle_at(idle).unwrap_or(now + idle),
        // Once passed with a request in flight, the close is the grace period's: look again
        // later rather than at once.
        Some(asked) => Some(asked + idle)
            .filter(|at| *at > now)
            .unwrap_or(now + idle),
    };
    let mut wake = idle_at.min(now + limits.header_read_timeout);
    if let Some(since) = activity.stalled_since() {
        wake = wake.min(since + idle);
    }
    if let Some(since) = activity.head_since() {
        wake = wake.min(since + limits.header_read_timeout);
    }
    wake
}

async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // A dropped sender means nobody can ask for a stop any more: keep serving.
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_header_bytes: 16 * 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1,
            shutdown_grace: Duration::from_secs(1),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_is_looked_at_no_later_than_a_head_could_be_due() {
        let activity = Activity::new();
        let now = Instant::now();
        assert_eq!(
            next_wake(&activity, &limits(), None, now),
            now + limits().header_read_timeout
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_begun_while_the_watch_slept_is_woken_for_at_its_own_deadline() {
        let activity = Activity::new();
        let slept_at = Instant::now();
        let first = next_wake(&activity, &limits(), None, slept_at);
        tokio::time::advance(Duration::from_secs(3)).await;
        activity.read(true);
        let begun = Instant::now();
        let due = begun + limits().header_read_timeout;
        // The sleep set before the head began ends before the head is due...
        assert!(first <= due);
        // ...and the one set then ends exactly when it is due.
        assert_eq!(next_wake(&activity, &limits(), None, first), due);
    }

    #[tokio::test(start_paused = true)]
    async fn a_closing_connection_is_looked_at_once_the_idle_timeout_has_passed_since_it_was_asked()
    {
        let activity = Activity::new();
        let mut limits = limits();
        limits.header_read_timeout = Duration::from_secs(600);
        let asked = Instant::now();
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(
            next_wake(&activity, &limits, Some(asked), Instant::now()),
            asked + limits.idle_timeout
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_quiet_for_the_idle_timeout_is_idle_from_its_last_activity() {
        let activity = Activity::new();
        let quiet = Instant::now();
        tokio::time::advance(limits().idle_timeout).await;
        let now = Instant::now();
        assert_eq!(due(&activity, &limits(), None, now), Due::Idle(quiet));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_head_begun_is_not_closed_as_idle_before_its_own_deadline() {
        let activity = Activity::new();
        let mut limits = limits();
        limits.idle_timeout = Duration::from_secs(2);
        activity.read(true);
        tokio::time::advance(Duration::from_secs(5)).await;
        let now = Instant::now();
        assert_eq!(due(&activity, &limits, None, now), Due::Nothing);
        // Nor looked at in a loop meanwhile.
        assert!(next_wake(&activity, &limits, None, now) > now);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(
            due(&activity, &limits, None, Instant::now()),
            Due::HeadTooLong
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_closing_connection_quiet_since_the_close_was_asked_is_held() {
        let activity = Activity::new();
        let asked = Instant::now();
        tokio::time::advance(limits().idle_timeout / 2).await;
        let now = Instant::now();
        assert_eq!(due(&activity, &limits(), Some(asked), now), Due::Nothing);
        tokio::time::advance(limits().idle_timeout / 2).await;
        let now = Instant::now();
        assert_eq!(
            due(&activity, &limits(), Some(asked), now),
            Due::ClosingHeld(asked)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_seen_to_progress_is_neither_idle_nor_held_from_then() {
        let activity = Activity::new();
        tokio::time::advance(limits().idle_timeout).await;
        let mark = activity.progressed();
        assert_eq!(
            due(&activity, &limits(), None, Instant::now()),
            Due::Nothing
        );
        tokio::time::advance(limits().idle_timeout).await;
        assert_eq!(
            due(&activity, &limits(), None, Instant::now()),
            Due::Idle(mark)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_closing_connection_past_its_deadline_is_not_looked_at_in_a_loop() {
        let activity = Activity::new();
        let asked = Instant::now();
        tokio::time::advance(limits().idle_timeout * 2).await;
        let now = Instant::now();
        assert!(next_wake(&activity, &limits(), Some(asked), now) > now);
    }
}
