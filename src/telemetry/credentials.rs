//! The credential policy stage: answers it stripped, answers served with injected properties,
//! and answers it refused because it could not check them.

use prometheus::{IntCounter, Registry};

use super::registry::counter;

pub struct CredentialMetrics {
    stripped: IntCounter,
    injected: IntCounter,
    refused: IntCounter,
}

impl CredentialMetrics {
    pub fn new(r: &Registry) -> CredentialMetrics {
        CredentialMetrics {
            stripped: counter(
                r,
                "icecache_credentials_stripped_total",
                "Answers from which credential keys were removed.",
            ),
            injected: counter(
                r,
                "icecache_credentials_injected_total",
                "Answers served with injected properties.",
            ),
            refused: counter(
                r,
                "icecache_credentials_refused_total",
                "Answers refused (502) under strip or inject because they could not be checked \
                 for credentials.",
            ),
        }
    }

    pub fn stripped(&self) {
        self.stripped.inc();
    }

    pub fn injected(&self) {
        self.injected.inc();
    }

    pub fn refused(&self) {
        self.refused.inc();
    }
}
