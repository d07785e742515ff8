//! What goes on the wire whatever the route: the body type, the host a request names, hop-by-hop
//! and forwarding headers, entity tags and conditionals, content codings, JSON read the way
//! the loosest reader does, counts of seconds, request ids, credentials marked sensitive,
//! fields packed into one for heads built once, and which names a request's head may hold.

pub mod body;
pub mod encoding;
pub mod etag;
pub mod headers;
pub mod host;
pub mod json;
pub mod json_walk;
pub mod name_bits;
pub mod packed;
pub mod request_id;
pub mod seconds;
pub mod sensitive;
pub mod target;
