//! Ports for servers that must be told theirs before they start (SeaweedFS and its webhook's
//! receiver, redis-server, nats-server, rustberg) or that restart on the one they had. They come
//! from a range just below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), which
//! neither `bind` to port 0 nor an outgoing connection ever takes, so no socket on this machine
//! is handed one behind the suite's back; within the suite each is given out once. Servers that
//! can report the port they bound (icecache, the stand-ins, Trino, the reference catalog) bind
//! port 0 instead.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// How many ports below the ephemeral range the suite takes.
const SPAN: u32 = 6000;

/// The lowest ephemeral port (32768 unless the machine says otherwise).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// A port of the suite's range that nothing listens on now and that no other caller in this
/// process has been or will be given.
pub fn reserved() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = ephemeral_low();
    assert!(
        low > SPAN + 1024,
        "the ephemeral range starts at {low}: too low to keep ports for the suite below it"
    );
    // Each test binary starts at its own place in the range, so a server a previous binary
    // left in TIME_WAIT is not in the way.
    let start = (std::process::id() * 97) % SPAN;
    for _ in 0..SPAN {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = u16::try_from(low - SPAN + offset).expect("a port below 65536");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("every port of the suite's range is in use");
}

/// A URL where nothing listens (a catalog that is down), on a port nothing else is given.
pub fn nothing_listens() -> String {
    format!("http://127.0.0.1:{}", reserved())
}
