//! What one replica tells the others of a write: the tables it touched, on one pub/sub channel.
//! Under `read-your-writes` the messages only free memory early (the tokens are the truth);
//! under `bounded` they are how the others learn, and the delay they took is measured.

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::catalog::names::LooseName;
use crate::catalog::writes::Touched;

/// What the cache must drop, and (under leases) whom to tell once it has.
pub struct Invalidation {
    pub touched: Touched,
    pub dropped: Option<oneshot::Sender<()>>,
}

impl Invalidation {
    pub fn of(touched: Touched) -> Invalidation {
        Invalidation {
            touched,
            dropped: None,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Message {
    /// The replica that sent it (it ignores its own).
    pub r: String,
    /// Wall-clock milliseconds when it was sent.
    pub ms: u64,
    /// Tables, as namespace parts and name.
    #[serde(default)]
    pub t: Vec<(Vec<String>, String)>,
    /// Namespaces.
    #[serde(default)]
    pub n: Vec<Vec<String>>,
    #[serde(default)]
    pub all: bool,
}

impl Message {
    pub fn new(replica: &str, sent_ms: u64, touched: &Touched) -> Message {
        let mut message = Message {
            r: replica.to_owned(),
            ms: sent_ms,
            t: Vec::new(),
            n: Vec::new(),
            all: false,
        };
        match touched {
            Touched::Tables(tables) => {
                message.t = tables
                    .iter()
                    .map(|t| (t.namespace().to_vec(), t.table().to_owned()))
                    .collect();
            }
            Touched::Namespace(namespace) => message.n = vec![namespace.clone()],
            Touched::Everything => message.all = true,
            Touched::Nothing => {}
        }
        message
    }

    /// What the message says was touched. A message that names nothing of the kinds above
    /// touches everything: it is not one icecache would send.
    pub fn touched(&self) -> Touched {
        if self.all || (self.t.is_empty() && self.n.is_empty()) {
            return Touched::Everything;
        }
        if !self.n.is_empty() {
            // A namespace message names one namespace; a mixed one is read as everything.
            return if self.t.is_empty() && self.n.len() == 1 {
                Touched::namespace(self.n[0].clone())
            } else {
                Touched::Everything
            };
        }
        Touched::Tables(
            self.t
                .iter()
                .map(|(namespace, table)| LooseName::new(namespace, table))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_says_what_the_write_touched() {
        let touched = Touched::Tables(vec![LooseName::new(&["a", "b"], "t")]);
        let message = Message::new("r1", 5, &touched);
        let text = serde_json::to_string(&message).unwrap();
        let back: Message = serde_json::from_str(&text).unwrap();
        assert_eq!(back.touched(), touched);
        assert_eq!(
            Message::new("r1", 5, &Touched::Namespace(vec!["a".into()])).touched(),
            Touched::Namespace(vec!["a".into()])
        );
        let odd: Message = serde_json::from_str(r#"{"r":"x","ms":1}"#).unwrap();
        assert_eq!(odd.touched(), Touched::Everything);
    }
}
