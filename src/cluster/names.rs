//! The names icecache gives things in Redis. Tables and cache keys are named by a keyed hash
//! (the cluster key), so the names are short and say nothing of the tables or callers behind
//! them to anyone who can read Redis.

use super::trust::scripts::LeaseKeys;
use crate::catalog::names::LooseName;

pub struct Names {
    prefix: String,
    key: [u8; 32],
}

impl Names {
    pub fn new(prefix: &str, key: [u8; 32]) -> Names {
        Names {
            prefix: prefix.to_owned(),
            key,
        }
    }

    fn hash(&self, kind: &str, parts: &[&[u8]]) -> String {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(kind.as_bytes());
        for part in parts {
            hasher.update(&u64::try_from(part.len()).unwrap_or(u64::MAX).to_le_bytes());
            hasher.update(part);
        }
        let hex = hasher.finalize().to_hex();
        format!("{}:{kind}:{}", self.prefix, &hex.as_str()[..32])
    }

    /// Moved by writes icecache cannot name tables for, and after a replica answered writes
    /// Redis was not told of.
    pub fn epoch(&self) -> String {
        format!("{}:epoch", self.prefix)
    }

    /// The channel a replica's own heartbeat is published on: hearing it proves the
    /// subscription works.
    pub fn beat_channel(&self, replica: &str) -> String {
        format!("{}:beat:{replica}", self.prefix)
    }

    pub fn table(&self, table: &LooseName) -> String {
        let mut parts: Vec<&[u8]> = table.namespace().iter().map(|p| p.as_bytes()).collect();
        parts.push(table.table().as_bytes());
        self.hash("t", &parts)
    }

    pub fn namespace(&self, namespace: &[String]) -> String {
        let parts: Vec<&[u8]> = namespace.iter().map(|p| p.as_bytes()).collect();
        self.hash("n", &parts)
    }

    /// The token keys whose values name a table's version: the epoch, each namespace it lies
    /// in (a namespace drop moves one), and the table itself.
    pub fn tokens(&self, table: &LooseName) -> Vec<String> {
        let namespace = table.namespace();
        let mut keys = Vec::with_capacity(namespace.len() + 2);
        keys.push(self.epoch());
        for depth in 1..=namespace.len() {
            keys.push(self.namespace(&namespace[..depth]));
        }
        keys.push(self.table(table));
        keys
    }

    /// Where an entry shared with the tier lives; `identity` is the cache key's bytes.
    pub fn shared(&self, identity: &[u8]) -> String {
        self.hash("e", &[identity])
    }

    pub fn lease(&self, identity: &[u8]) -> String {
        self.hash("l", &[identity])
    }

    /// Where a kept answer to a request with an `Idempotency-Key` lives; `id` names the caller
    /// and the key.
    pub fn replay(&self, id: &[u8]) -> String {
        self.hash("r", &[id])
    }

    pub fn channel(&self) -> String {
        format!("{}:invalidations", self.prefix)
    }

    /// Where the lease model keeps its log, its members, and publishes its invalidations and
    /// their acknowledgements (`consistency = "leases"`).
    pub fn lease_keys(&self) -> LeaseKeys {
        LeaseKeys {
            log: format!("{}:lease:log", self.prefix),
            members: format!("{}:lease:members", self.prefix),
            channel: format!("{}:lease:invalidations", self.prefix),
        }
    }

    pub fn ack_channel(&self) -> String {
        format!("{}:lease:acks", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_depend_on_the_key_and_say_nothing_of_the_table() {
        let table = LooseName::new(&["secret_ns".to_owned()], "secret_table");
        let one = Names::new("icecache", [1; 32]);
        let two = Names::new("icecache", [2; 32]);
        assert_ne!(one.table(&table), two.table(&table));
        assert!(!one.table(&table).contains("secret"));
        assert_eq!(one.tokens(&table).len(), 3);
    }
}
