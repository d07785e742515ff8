//! Where requests come in: the accept loop with its protocol detection, limits and drain
//! (`server`), TLS on both sides with certificate reload (`tls`), writing `ETag` in that case on
//! HTTP/1.1 (`header_case`), and plain connections that send sealed bodies with `sendfile`
//! (`sendfile`).

pub mod header_case;
pub mod sendfile;
pub mod server;
pub mod tls;
