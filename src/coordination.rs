//! What the cache and a tier of replicas say to each other, in words neither owns: a table's
//! version in the tier, and how the other replicas learn of a write. A leaf: the cache and the
//! cluster both use it, and neither imports the other.

/// A table's tokens: the tier's epoch's, its namespaces' and its own (random values, replaced
/// by every write that touches them). Under read-your-writes an entry filled under one set is
/// current only while its table's tokens are still those.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens(pub Vec<u64>);

/// How the other replicas learn of a write this replica answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// The tier was told (its tokens moved, or a heartbeat moved the epoch).
    Announced,
    /// The tier was not told, but every other replica distrusts what it holds until it is,
    /// or until it forgets this replica (which moves the epoch).
    Distrusted,
    /// The tier was not told, and this replica had been out of touch for `member_timeout`
    /// when the answer came: the others may have forgotten it before the catalog made the
    /// write.
    Lost,
}
