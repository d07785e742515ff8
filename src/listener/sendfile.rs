//! A plain TCP connection that sends sealed cached bodies with `sendfile`.
//!
//! hyper's HTTP/1 writer hands a response's head and its body chunks to `poll_write_vectored`
//! as they are (its queue strategy), so a chunk that is a view of a sealed body
//! (`wire::sealed`) arrives here at its own address. Such a chunk goes out with `sendfile` from
//! its file: the kernel takes the page-cache pages, nothing is copied through user memory. What
//! comes before it in the same write (the head) goes with `MSG_MORE`, so head and body still
//! leave in full segments. Every other write is the stream's own. TLS connections never come
//! here: they must encrypt the bytes anyway.

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::wire::sealed::{self, InFile};

/// Chunks shorter than this are copied even when sealed (a slice around injected values): one
/// `writev` beats a second system call.
const MIN_SENDFILE_BYTES: usize = sealed::MIN_SEALED_BYTES;

pub struct SendfileStream {
    stream: TcpStream,
}

impl SendfileStream {
    pub fn new(stream: TcpStream) -> Self {
        SendfileStream { stream }
    }

    /// Runs a non-blocking system call when the socket is writable, waiting while it is not.
    fn poll_syscall(
        &self,
        cx: &mut Context<'_>,
        call: impl Fn(libc::c_int) -> isize,
    ) -> Poll<io::Result<usize>> {
        let fd = self.stream.as_raw_fd();
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            match self.stream.try_io(Interest::WRITABLE, || {
                let n = call(fd);
                usize::try_from(n).map_err(|_| io::Error::last_os_error())
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                result => return Poll::Ready(result),
            }
        }
    }

    fn poll_sendfile(
        &self,
        cx: &mut Context<'_>,
        file: InFile,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        self.poll_syscall(cx, |socket| {
            let Ok(mut offset) = libc::off_t::try_from(file.offset) else {
                return -1;
            };
            // SAFETY: the file is open while the chunk it was looked up for is borrowed.
            unsafe { libc::sendfile(socket, file.fd, &mut offset, len) }
        })
    }

    /// Writes `bufs`, telling the kernel more follows at once.
    fn poll_send_more(
        &self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_syscall(cx, |socket| {
            // SAFETY: `IoSlice` is ABI-compatible with `iovec`; the kernel only reads them.
            let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
            message.msg_iov = bufs.as_ptr().cast_mut().cast();
            message.msg_iovlen = bufs.len();
            // SAFETY: a valid message over borrowed buffers; the result is checked.
            unsafe { libc::sendmsg(socket, &message, libc::MSG_MORE | libc::MSG_NOSIGNAL) }
        })
    }
}

/// The first chunk at least `MIN_SENDFILE_BYTES` long that lies in a sealed file.
fn first_in_file(bufs: &[IoSlice<'_>]) -> Option<(usize, InFile)> {
    bufs.iter().enumerate().find_map(|(i, buf)| {
        if buf.len() < MIN_SENDFILE_BYTES {
            return None;
        }
        sealed::in_file(buf).map(|file| (i, file))
    })
}

impl AsyncRead for SendfileStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for SendfileStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match first_in_file(&[IoSlice::new(buf)]) {
            Some((_, file)) => self.poll_sendfile(cx, file, buf.len()),
            None => Pin::new(&mut self.stream).poll_write(cx, buf),
        }
    }

    /// One call sends what comes before the first sealed chunk, or that chunk: hyper calls
    /// again with the rest.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match first_in_file(bufs) {
            None => Pin::new(&mut self.stream).poll_write_vectored(cx, bufs),
            Some((first, file)) if bufs[..first].iter().all(|b| b.is_empty()) => {
                self.poll_sendfile(cx, file, bufs[first].len())
            }
            Some((first, _)) => self.poll_send_more(cx, &bufs[..first]),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
// The sealing lock only keeps other tests from changing the cap; each test runs on its own thread.
#[allow(clippy::await_holding_lock)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn body(len: usize) -> Bytes {
        (0..len).map(|i| (i % 253) as u8).collect::<Vec<_>>().into()
    }

    /// Writes `chunks` through a `SendfileStream` in one vectored write after another, as
    /// hyper does, and returns what the peer read.
    async fn sent(chunks: Vec<Bytes>) -> Vec<u8> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let reader = tokio::spawn(async move {
            let (mut peer, _) = listener.accept().await.expect("accept");
            let mut all = Vec::new();
            peer.read_to_end(&mut all).await.expect("read");
            all
        });
        let mut stream = SendfileStream::new(TcpStream::connect(address).await.expect("connect"));
        let mut chunks: Vec<Bytes> = chunks;
        while chunks.iter().any(|c| !c.is_empty()) {
            let slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
            let n = stream.write_vectored(&slices).await.expect("write");
            assert!(n > 0);
            let mut left = n;
            for chunk in &mut chunks {
                let take = left.min(chunk.len());
                let _ = chunk.split_to(take);
                left -= take;
            }
        }
        stream.shutdown().await.expect("shutdown");
        reader.await.expect("reader")
    }

    #[tokio::test]
    async fn a_head_and_a_sealed_body_arrive_whole_and_in_order() {
        let _on = sealed::sealing();
        let head = Bytes::from_static(b"HTTP/1.1 200 OK\r\ncontent-length: 300000\r\n\r\n");
        let plain = body(300_000);
        let sealed_body = sealed::seal(plain.clone());
        assert!(sealed::in_file(&sealed_body).is_some());
        let got = sent(vec![head.clone(), sealed_body.clone(), head.clone()]).await;
        assert_eq!(got, [&head[..], &plain[..], &head[..]].concat());
    }

    #[tokio::test]
    async fn sealed_pieces_around_an_injected_fragment_arrive_in_order() {
        let _on = sealed::sealing();
        let plain = body(200_000);
        let sealed_body = sealed::seal(plain.clone());
        let (before, after) = (sealed_body.slice(..70_000), sealed_body.slice(70_000..));
        let fragment = Bytes::from_static(b"\"s3.secret-access-key\":\"x\",");
        let got = sent(vec![before, fragment.clone(), after]).await;
        assert_eq!(
            got,
            [&plain[..70_000], &fragment[..], &plain[70_000..]].concat()
        );
    }

    #[tokio::test]
    async fn heap_chunks_are_written_as_they_are() {
        let head = Bytes::from_static(b"head");
        let plain = body(100_000);
        let got = sent(vec![head.clone(), plain.clone()]).await;
        assert_eq!(got, [&head[..], &plain[..]].concat());
    }
}
