//! A close that does not throw away what the client has yet to read.
//!
//! icecache closes a connection itself after an HTTP/1.1 `Connection: close`, an idle HTTP/2
//! connection's or a stopping listener's `GOAWAY`: it writes its last bytes and shuts its side.
//! A client still reading may still send: HTTP/2 gives flow-control window back as it reads, and
//! an HTTP/1.1 client may have sent its next request. Bytes that reach a closed socket, or wait
//! unread in one when it closes, make the kernel reset the connection, and a reset makes the
//! client's kernel drop what the client had not read yet: the end of an answer. So a connection
//! icecache shut down is kept open, and what arrives read and dropped, until the client closes
//! too, or sends nothing for `QUIET`, or `LONGEST` has passed (nginx's lingering close). The
//! connection's place among `max_connections` is held until then, and a stopping listener waits
//! for it within its shutdown grace.
//!
//! A connection cut without a shutdown (a stalled client, a head too slow) closes at once.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

/// How long a shut connection waits for its client's next bytes before it closes.
pub const QUIET: Duration = Duration::from_secs(5);
/// The longest a shut connection stays open, whatever its client sends.
pub const LONGEST: Duration = Duration::from_secs(30);

/// A client's connection, which lingers once icecache has shut it down.
pub struct Lingering {
    /// Taken only when the connection is dropped.
    stream: Option<TcpStream>,
    /// The connection's place among `max_connections`, held while it lingers.
    permit: Option<OwnedSemaphorePermit>,
    shut: bool,
}

impl Lingering {
    pub fn new(stream: TcpStream, permit: OwnedSemaphorePermit) -> Self {
        Lingering {
            stream: Some(stream),
            permit: Some(permit),
            shut: false,
        }
    }

    fn stream(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        match self.stream.as_mut() {
            Some(stream) => Ok(Pin::new(stream)),
            // Only `drop` takes the stream.
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        if !self.shut {
            return;
        }
        let (Some(stream), Ok(runtime)) =
            (self.stream.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let permit = self.permit.take();
        runtime.spawn(async move {
            linger(stream, QUIET, LONGEST).await;
            drop(permit);
        });
    }
}

/// Reads and drops what `stream`'s client sends until it closes, is quiet for `quiet`, or
/// `longest` has passed.
async fn linger(mut stream: TcpStream, quiet: Duration, longest: Duration) {
    let mut sink = [0u8; 4096];
    let drain = async {
        loop {
            match tokio::time::timeout(quiet, stream.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => continue,
                // Closed, failed or quiet.
                _ => return,
            }
        }
    };
    let _ = tokio::time::timeout(longest, drain).await;
}

impl AsyncRead for Lingering {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().stream()?.poll_read(cx, buf)
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().stream()?.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().stream()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().stream()?.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.stream()?.poll_shutdown(cx))?;
        this.shut = true;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;
    use tokio::sync::Semaphore;

    /// Bounds each wait so that a linger that never ends fails the test instead of hanging it.
    const PATIENCE: Duration = Duration::from_secs(30);

    /// A connected pair: icecache's side and the client's.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (accepted.unwrap().0, client.unwrap())
    }

    async fn released(places: &Semaphore) {
        let back = async {
            while places.available_permits() == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(PATIENCE, back)
            .await
            .expect("the connection's place came back");
    }

    #[tokio::test]
    async fn a_shut_connection_lingers_until_its_client_closes() {
        let places = Arc::new(Semaphore::new(1));
        let (near, mut client) = pair().await;
        let mut connection = Lingering::new(near, places.clone().try_acquire_owned().unwrap());
        connection.write_all(b"answer").await.unwrap();
        connection.shutdown().await.unwrap();
        drop(connection);
        // The client still sends after icecache's close, and then reads what it was sent. The
        // place is looked at first: the linger also ends after `QUIET` without bytes, which a
        // slow machine could reach while the client reads.
        client.write_all(b"window update").await.unwrap();
        assert_eq!(
            places.available_permits(),
            0,
            "the place went while lingering"
        );
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"answer");
        drop(client);
        released(&places).await;
    }

    #[tokio::test]
    async fn a_connection_cut_without_a_shutdown_does_not_linger() {
        let places = Arc::new(Semaphore::new(1));
        let (near, mut client) = pair().await;
        drop(Lingering::new(
            near,
            places.clone().try_acquire_owned().unwrap(),
        ));
        assert_eq!(places.available_permits(), 1);
        let mut got = Vec::new();
        let _ = client.read_to_end(&mut got).await;
        assert!(got.is_empty());
    }

    #[tokio::test]
    async fn a_quiet_client_is_not_waited_for() {
        let (near, _client) = pair().await;
        let lingered = linger(near, Duration::from_millis(50), PATIENCE * 10);
        tokio::time::timeout(PATIENCE, lingered)
            .await
            .expect("the linger ended on a quiet client");
    }

    #[tokio::test]
    async fn a_client_that_keeps_sending_is_waited_for_at_most_the_longest() {
        let (near, mut client) = pair().await;
        let chatter = tokio::spawn(async move {
            // Bounded: it stops at the first write the closed connection refuses.
            for _ in 0..100_000 {
                if client.write_all(b"more").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let lingered = linger(near, PATIENCE * 10, Duration::from_millis(200));
        tokio::time::timeout(PATIENCE, lingered)
            .await
            .expect("the linger ended at its longest");
        chatter.abort();
    }
}
