//! What goes on the wire whatever the route: the body type, the host a request names, hop-by-hop
//! and forwarding headers, entity tags and conditionals, content codings, JSON read the way
//! the loosest reader does, counts of seconds, request ids, and credentials marked sensitive.

pub mod body;
pub mod encoding;
pub mod etag;
pub mod headers;
pub mod host;
pub mod json;
pub mod json_walk;
pub mod request_id;
pub mod seconds;
pub mod sensitive;
pub mod target;
