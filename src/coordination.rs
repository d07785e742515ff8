//! What the cache and a tier of replicas say to each other, in words neither owns: a table's
//! version in the tier, and how the other replicas learn of a write. A leaf: the cache and the
//! cluster both use it, and neither imports the other.

/// A version of what an entry was filled under: in the tier's Redis, a table's tokens (the
/// epoch's, its namespaces' and its own: random values, replaced by every write that touches
/// them) with the lease log's dataset, which a shared entry must match; in a replica's memory,
/// its lease's generation, which a held entry must match.
///
/// Two values are kept inline: a lease's tokens (a mark and the generation), read on every hit,
/// are never allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens(pub smallvec::SmallVec<[u64; 2]>);

/// How the other replicas learn of a write this replica answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// The tier was told: its tokens moved, and every other replica acknowledged the
    /// invalidation or its lease ran out.
    Announced,
    /// The tier could not be told in time: a load elsewhere may not reflect the write yet.
    Lost,
}
