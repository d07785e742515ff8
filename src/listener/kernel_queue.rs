//! Whether a client is still taking an answer that has left icecache: the bytes the kernel
//! holds for it, unsent, on the connection's socket.
//!
//! Once an answer is handed to the socket, icecache's own writes say nothing more: a kernel
//! buffer of megabytes drains for seconds at a slow reader's pace, and the kernel wakes a
//! blocked writer only once a good part of it is free, which at that pace can take longer than
//! the idle timeout. So before a connection is cut as stalled or closed as idle, its watch
//! asks the kernel: a queue that shrank since the watch's last look (from the same mark) is a
//! client that read, and a queue not yet looked at is given the benefit of one more timeout
//! when it holds anything. A queue that holds nothing, or did not move, is what it seems.

use std::os::fd::RawFd;

use tokio::time::Instant;

/// The kernel's unsent bytes on one socket, as the watch last saw them.
pub struct KernelQueue {
    fd: Option<RawFd>,
    /// The mark the last look was taken at, and what the kernel held then.
    seen: Option<(Instant, u32)>,
}

impl KernelQueue {
    /// `fd`: the connection's TCP socket, open for as long as this is used (the watch that
    /// owns this also owns the connection), or None where the kernel cannot be asked.
    pub fn new(fd: Option<RawFd>) -> Self {
        KernelQueue { fd, seen: None }
    }

    /// Whether the client took bytes from the kernel since `mark`, the last sign of life the
    /// watch knows of; remembers this look under `mark`.
    pub fn moved_since(&mut self, mark: Instant) -> bool {
        let Some(unsent) = self.fd.and_then(unsent_bytes) else {
            return false;
        };
        let moved = took_bytes(self.seen, mark, unsent);
        self.seen = Some((mark, unsent));
        moved
    }

    /// The watch moved the connection's marks to `mark` after a look that saw it move: the
    /// next look compares with that one.
    pub fn rebase(&mut self, mark: Instant) {
        if let Some(seen) = &mut self.seen {
            seen.0 = mark;
        }
    }

    /// Whether the client has closed its side (or reset the connection) while nothing of it is
    /// left unread in the kernel: what HTTP/1.1 cannot see while it holds bytes the client sent
    /// after a request's head, since it reads no further until that request is answered.
    pub fn client_left(&self) -> bool {
        self.fd.is_some_and(closed_by_peer)
    }
}

/// The decision alone: against a look taken at the same mark, a smaller queue; with none to
/// compare with (a first look, or the connection moved on its own since), any queue at all.
fn took_bytes(seen: Option<(Instant, u32)>, mark: Instant, unsent: u32) -> bool {
    match seen {
        Some((at, before)) if at == mark => unsent < before,
        _ => unsent > 0,
    }
}

#[cfg(target_os = "linux")]
fn unsent_bytes(fd: RawFd) -> Option<u32> {
    let mut unsent: libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one int through the pointer, which points at a local int; `fd`
    // is the socket of a connection its caller still owns, so it is open (a closed or reused
    // number would only make the call fail or answer for another socket, never touch memory).
    let result = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut unsent) };
    (result == 0).then(|| u32::try_from(unsent).unwrap_or(0))
}

#[cfg(not(target_os = "linux"))]
fn unsent_bytes(_fd: RawFd) -> Option<u32> {
    None
}

#[cfg(target_os = "linux")]
fn closed_by_peer(fd: RawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: a peek of at most one byte into a local byte, without waiting; `fd` is open as
    // above. Nothing is taken from the socket.
    let read = unsafe {
        libc::recv(
            fd,
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match read {
        // The end of the client's stream, with nothing before it.
        0 => true,
        -1 => matches!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ECONNRESET | libc::EPIPE | libc::ENOTCONN)
        ),
        _ => false,
    }
}

#[cfg(not(target_os = "linux"))]
fn closed_by_peer(_fd: RawFd) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_queue_that_shrank_since_the_last_look_at_the_same_mark_moved() {
        let mark = Instant::now();
        assert!(took_bytes(Some((mark, 500)), mark, 400));
    }

    #[test]
    fn a_queue_that_did_not_shrink_since_the_last_look_did_not_move() {
        let mark = Instant::now();
        assert!(!took_bytes(Some((mark, 500)), mark, 500));
        assert!(!took_bytes(Some((mark, 500)), mark, 900));
    }

    #[test]
    fn a_first_look_counts_a_held_queue_as_moving_and_an_empty_one_as_not() {
        let mark = Instant::now();
        assert!(took_bytes(None, mark, 1));
        assert!(!took_bytes(None, mark, 0));
    }

    #[test]
    fn a_look_from_another_mark_is_a_first_look() {
        // The connection moved on its own between the looks (and may have refilled the queue).
        let earlier = Instant::now();
        let later = earlier + Duration::from_secs(1);
        assert!(took_bytes(Some((earlier, 100)), later, 900));
        assert!(!took_bytes(Some((earlier, 100)), later, 0));
    }

    #[test]
    fn a_socket_whose_reader_takes_nothing_holds_what_was_written() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut writer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_reader, _) = listener.accept().unwrap();
        let mut queue = KernelQueue::new(Some(writer.as_raw_fd()));
        assert!(!queue.moved_since(Instant::now()), "an empty queue moved");
        // Written until the kernel takes no more: the reader's buffer is full and the rest
        // waits on this side.
        writer.set_nonblocking(true).unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        let mut written = 0usize;
        loop {
            match writer.write(&chunk) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("write failed: {e}"),
            }
            assert!(written < 1 << 30, "the kernel took a gigabyte");
        }
        // Acknowledgements still on their way would shrink it: wait until it holds still.
        let fd = writer.as_raw_fd();
        for _ in 0..100 {
            let before = unsent_bytes(fd);
            std::thread::sleep(std::time::Duration::from_millis(20));
            if unsent_bytes(fd) == before {
                break;
            }
        }
        let mark = Instant::now();
        assert!(queue.moved_since(mark), "a held queue on a first look");
        assert!(!queue.moved_since(mark), "a reader taking nothing moved");
    }
}
