//! Where requests come in: the accept loop with its protocol detection, limits and drain
//! (`server`), when a connection is idle (`activity`) and whether the kernel still
//! drains an answer to its client (`kernel_queue`), a close that lets the client read what it
//! was sent (`lingering`), TLS on both sides with certificate
//! reload (`tls`), HTTP/2's TLS records sent once per turn of its connection (`corked`), a
//! connection's watch polled only when it woke (`wake_gate`), and
//! writing `ETag` in that case on HTTP/1.1 (`header_case`).

mod activity;
mod corked;
pub mod header_case;
mod kernel_queue;
mod lingering;
pub mod server;
pub mod tls;
mod wake_gate;
