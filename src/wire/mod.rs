//! What goes on the wire whatever the route: the body type, hop-by-hop and forwarding headers,
//! entity tags and conditionals, content codings, JSON read the way the loosest reader does, and
//! large cached bodies kept in sealed files the kernel can send (`sealed`).

pub mod body;
pub mod encoding;
pub mod etag;
pub mod headers;
pub mod json;
pub mod sealed;
