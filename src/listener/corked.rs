//! TLS records for HTTP/2 sent once per turn of the connection, not at each frame.
//!
//! tokio-rustls sends what it has encrypted to the socket at every write, and h2 flushes after
//! each DATA frame it writes (it holds one frame's payload at a time), so a 50 KB answer over
//! HTTP/2 cost four `writev` calls, and four wake-ups of the client, where HTTP/1.1 over the same
//! TLS made one. `Corked` encrypts each write into rustls's outgoing buffer and, at a flush,
//! notes that the buffer is to be sent and wakes the connection's task instead of sending it. The
//! next thing the connection does with its I/O, which on that wake-up is h2 reading its socket,
//! first sends every record rustls holds, in one `writev`. A write rustls cannot take (its buffer
//! is at its limit, 64 KiB) sends the buffer at once.
//!
//! Why a deferred send always happens: the flush that defers wakes the task, and h2 reads its
//! socket at every turn before it writes (`Connection::poll` reads until the socket has nothing,
//! then writes what is ready), and at shutdown it flushes and closes, which send too.

use std::io::{self, IoSlice, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;

pub struct Corked<I> {
    tls: TlsStream<I>,
    /// A flush was deferred: the records rustls holds go out before anything else is done.
    owed: bool,
}

impl<I: AsyncRead + AsyncWrite + Unpin> Corked<I> {
    pub fn new(tls: TlsStream<I>) -> Self {
        Corked { tls, owed: false }
    }

    /// Sends every record rustls holds; `owed` stays set while the socket is full.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(Pin::new(&mut self.tls).poll_flush(cx))?;
        self.owed = false;
        Poll::Ready(Ok(()))
    }

    /// Encrypts what rustls takes of `write`'s bytes; when its buffer is full, sends it first.
    fn poll_encrypt(
        &mut self,
        cx: &mut Context<'_>,
        asked: usize,
        mut write: impl FnMut(&mut rustls::ServerConnection) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        if asked == 0 {
            return Poll::Ready(Ok(0));
        }
        let taken = write(self.tls.get_mut().1)?;
        if taken > 0 {
            return Poll::Ready(Ok(taken));
        }
        // rustls took nothing: its buffer is at its limit. Sending it makes room, or waits for
        // the socket to. Taking nothing from an empty buffer is a connection that can no longer
        // write, which a write of 0 bytes tells the protocol.
        ready!(self.poll_send(cx))?;
        Poll::Ready(write(self.tls.get_mut().1))
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncRead for Corked<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.owed {
            // A full socket leaves it owed, with this task woken when the socket drains.
            if let Poll::Ready(Err(e)) = self.poll_send(cx) {
                return Poll::Ready(Err(e));
            }
        }
        Pin::new(&mut self.tls).poll_read(cx, buf)
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Corked<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_encrypt(cx, buf.len(), |tls| tls.writer().write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let asked = bufs.iter().map(|b| b.len()).sum();
        // rustls fills each record from as many slices as it spans, so a frame's header and
        // its payload share a record.
        self.get_mut()
            .poll_encrypt(cx, asked, |tls| tls.writer().write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Woken once per debt: a send that finds the socket full waits for it to drain, and
        // waking again at each flush meanwhile would spin.
        if !self.owed && self.tls.get_ref().1.wants_write() {
            self.owed = true;
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use rustls::pki_types::{PrivateKeyDer, ServerName};
    use tokio::io::{AsyncReadExt, DuplexStream};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    /// The server's side of a connection as a socket is: a vectored write sends every slice,
    /// and each write that reaches it is counted.
    struct Socket {
        io: DuplexStream,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncRead for Socket {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Socket {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.poll_write_vectored(cx, &[IoSlice::new(buf)])
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let whole: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let result = Pin::new(&mut self.io).poll_write(cx, &whole);
            if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
                self.writes.fetch_add(1, Ordering::SeqCst);
            }
            result
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }

    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Connection {
        server: Corked<Socket>,
        client: tokio_rustls::client::TlsStream<DuplexStream>,
        /// Writes that reached the server's socket since the handshake.
        writes: Arc<AtomicUsize>,
        wakes: Arc<Wakes>,
        waker: Waker,
    }

    impl Connection {
        async fn new() -> Connection {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
                .unwrap()
                .self_signed(&key)
                .unwrap();
            let server = rustls::ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
                )
                .unwrap();
            let mut roots = rustls::RootCertStore::empty();
            roots.add(cert.der().clone()).unwrap();
            let client = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            let (near, far) = tokio::io::duplex(4 << 20);
            let writes = Arc::new(AtomicUsize::new(0));
            let socket = Socket {
                io: near,
                writes: writes.clone(),
            };
            let name = ServerName::try_from("localhost").unwrap();
            let (server, client) = tokio::join!(
                TlsAcceptor::from(Arc::new(server)).accept(socket),
                TlsConnector::from(Arc::new(client)).connect(name, far)
            );
            writes.store(0, Ordering::SeqCst);
            let wakes = Arc::new(Wakes::default());
            Connection {
                server: Corked::new(server.unwrap()),
                client: client.unwrap(),
                writes,
                waker: Waker::from(wakes.clone()),
                wakes,
            }
        }

        fn writes(&self) -> usize {
            self.writes.load(Ordering::SeqCst)
        }

        fn wakes(&self) -> usize {
            self.wakes.0.load(Ordering::SeqCst)
        }

        /// One frame written, in as many writes as it takes, and flushed, as h2 does with each
        /// DATA frame.
        fn write_and_flush(&mut self, frame: &[u8]) {
            let mut cx = Context::from_waker(&self.waker);
            let mut left = frame;
            while !left.is_empty() {
                match Pin::new(&mut self.server).poll_write(&mut cx, left) {
                    Poll::Ready(Ok(n)) if n > 0 => left = &left[n..],
                    other => panic!("a write to a socket with room: {other:?}"),
                }
            }
            assert!(Pin::new(&mut self.server).poll_flush(&mut cx).is_ready());
        }

        /// The connection's next turn: it reads, and the client has sent nothing.
        fn read_finding_nothing(&mut self) {
            let mut cx = Context::from_waker(&self.waker);
            let mut bytes = [0u8; 64];
            let mut buf = ReadBuf::new(&mut bytes);
            assert!(Pin::new(&mut self.server)
                .poll_read(&mut cx, &mut buf)
                .is_pending());
        }

        async fn client_reads(&mut self, length: usize) -> Vec<u8> {
            let mut got = vec![0u8; length];
            // Bounded so that records never sent fail the test instead of hanging it.
            let read = self.client.read_exact(&mut got);
            tokio::time::timeout(std::time::Duration::from_secs(30), read)
                .await
                .expect("the records were sent")
                .unwrap();
            got
        }
    }

    fn answer(length: usize) -> Vec<u8> {
        (0..length).map(|i| (i % 251) as u8).collect()
    }

    #[tokio::test]
    async fn frames_flushed_one_at_a_time_go_out_in_one_write_at_the_next_read() {
        let mut connection = Connection::new().await;
        let body = answer(50_000);
        for frame in body.chunks(16_384) {
            connection.write_and_flush(frame);
        }
        assert_eq!(connection.writes(), 0, "a flush sent records");
        assert_eq!(connection.wakes(), 1, "the task is woken once to send");
        connection.read_finding_nothing();
        assert_eq!(connection.writes(), 1);
        assert_eq!(connection.client_reads(body.len()).await, body);
    }

    #[tokio::test]
    async fn more_than_rustls_holds_is_sent_as_it_fills_and_arrives_whole() {
        let mut connection = Connection::new().await;
        let body = answer(300_000);
        for frame in body.chunks(16_384) {
            connection.write_and_flush(frame);
        }
        let before_the_read = connection.writes();
        assert!(before_the_read > 0, "rustls held 300 KB");
        connection.read_finding_nothing();
        assert_eq!(connection.writes(), before_the_read + 1);
        assert_eq!(connection.client_reads(body.len()).await, body);
    }

    #[tokio::test]
    async fn a_flush_while_a_send_is_owed_does_not_wake_the_task_again() {
        let mut connection = Connection::new().await;
        connection.write_and_flush(b"first");
        connection.write_and_flush(b"second");
        assert_eq!(connection.wakes(), 1);
        connection.read_finding_nothing();
        connection.write_and_flush(b"third");
        assert_eq!(connection.wakes(), 2, "a new debt wakes the task");
        connection.read_finding_nothing();
        assert_eq!(connection.client_reads(16).await, b"firstsecondthird");
    }

    #[tokio::test]
    async fn a_flush_with_nothing_to_send_owes_nothing() {
        let mut connection = Connection::new().await;
        let mut cx = Context::from_waker(&connection.waker);
        assert!(Pin::new(&mut connection.server)
            .poll_flush(&mut cx)
            .is_ready());
        connection.read_finding_nothing();
        assert_eq!((connection.wakes(), connection.writes()), (0, 0));
    }

    #[tokio::test]
    async fn a_shutdown_sends_what_is_owed_before_closing() {
        let mut connection = Connection::new().await;
        let body = answer(40_000);
        connection.write_and_flush(&body);
        let mut cx = Context::from_waker(&connection.waker);
        assert!(Pin::new(&mut connection.server)
            .poll_shutdown(&mut cx)
            .is_ready());
        let mut got = Vec::new();
        connection.client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, body);
    }
}
