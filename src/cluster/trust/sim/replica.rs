//! What a replica does with each event: icecache's tier logic around [`Trust`], as the real
//! one will run it (heartbeats, invalidations and acknowledgements, loads, writes).

use std::time::Duration;

use tokio::time::Instant;

use super::super::{Apply, Renewal, Trust, Verdict};
use super::events::{Cmd, Ev, Fetch};
use super::{Answered, Entry, Served, World, Writing, FRESH_FOR_US, RETRY_US};

impl World {
    pub(super) fn replica(&mut self, r: usize, ev: Ev) {
        let now = self.clock(r, self.now);
        match ev {
            Ev::Tick => {
                let stamp = self.rng.next();
                let heartbeat = self.replicas[r].trust.heartbeat(stamp);
                let (applied, stamp) = (heartbeat.applied, heartbeat.stamp);
                self.command(
                    r,
                    Cmd::Heartbeat {
                        sent: now,
                        applied,
                        stamp,
                    },
                );
                let next = self.after(r, self.rules.heartbeat_every());
                let incarnation = self.replicas[r].incarnation;
                self.at(next, Some((r, incarnation)), Ev::Tick);
            }
            Ev::HeartbeatAnswer { sent, reply } => {
                let trust = &mut self.replicas[r].trust;
                if trust.answered(sent, now, &reply) == Renewal::Reset {
                    self.tally.resets += 1;
                }
                let dataset = trust.dataset().unwrap_or_default();
                for (member, stamp) in trust.expired_peers(now) {
                    self.command(
                        r,
                        Cmd::Forget {
                            member,
                            dataset,
                            stamp,
                        },
                    );
                }
            }
            Ev::Invalidation {
                position,
                write,
                table,
            } => {
                let replica = &mut self.replicas[r];
                replica.tickets[table] += 1;
                replica.entries.remove(&table);
                if replica.trust.invalidation(now, position) == Apply::Everything {
                    replica.entries.clear();
                    self.tally.resets += 1;
                }
                self.command(r, Cmd::Ack { write });
            }
            Ev::Acked { write, member } => {
                if let Some(Writing {
                    wait: Some(wait), ..
                }) = self.replicas[r].writes.get_mut(&write)
                {
                    wait.acknowledged(member, write);
                }
                self.maybe_answer(r, write, now);
            }
            Ev::Load { table, began } => {
                self.tally.loads += 1;
                let replica = &self.replicas[r];
                if let Some(entry) = replica.entries.get(&table) {
                    if entry.expires > self.now
                        && replica.trust.may_serve(now, entry.generation) == Verdict::Serve
                    {
                        self.tally.hits += 1;
                        let (version, filled_from) = (entry.version, entry.filled_from);
                        self.served.push(Served {
                            table,
                            began,
                            version,
                            filled_from,
                        });
                        return;
                    }
                }
                let (ticket, generation) = (replica.tickets[table], replica.trust.generation());
                let (version, fill, incarnation) =
                    (self.catalog[table], self.now, replica.incarnation);
                // The catalog's answer is sometimes slow: writes land meanwhile.
                let took = if self.rng.chance(5) {
                    self.rng.between(50_000, 800_000)
                } else {
                    self.rng.between(200, 6_000)
                };
                self.at(
                    self.now + took,
                    Some((r, incarnation)),
                    Ev::Fetched(Fetch {
                        table,
                        version,
                        ticket,
                        generation,
                        began,
                        fill,
                    }),
                );
            }
            Ev::Fetched(fetch) => {
                let replica = &mut self.replicas[r];
                if replica.tickets[fetch.table] == fetch.ticket {
                    let entry = Entry {
                        version: fetch.version,
                        generation: fetch.generation,
                        expires: fetch.fill + FRESH_FOR_US,
                        filled_from: fetch.fill,
                    };
                    replica.entries.insert(fetch.table, entry);
                }
                self.served.push(Served {
                    table: fetch.table,
                    began: fetch.began,
                    version: fetch.version,
                    filled_from: fetch.fill,
                });
            }
            Ev::Write { table } => {
                let write = self.rng.next();
                self.catalog[table] += 1;
                let version = self.catalog[table];
                let (at, incarnation) = (
                    self.now + self.rng.between(200, 6_000),
                    self.replicas[r].incarnation,
                );
                self.replicas[r].writes.insert(
                    write,
                    Writing {
                        table,
                        version,
                        wait: None,
                    },
                );
                self.at(at, Some((r, incarnation)), Ev::Committed { write });
            }
            Ev::Committed { write, .. } | Ev::Retry { write } => {
                let replica = &mut self.replicas[r];
                let Some(writing) = replica.writes.get(&write) else {
                    return;
                };
                if writing.wait.is_some() {
                    return;
                }
                let table = writing.table;
                replica.tickets[table] += 1;
                replica.entries.remove(&table);
                self.command(r, Cmd::Invalidate { write, table });
                let retry = self.after(r, Duration::from_micros(RETRY_US));
                let incarnation = self.replicas[r].incarnation;
                self.at(retry, Some((r, incarnation)), Ev::Retry { write });
            }
            Ev::Invalidated {
                write,
                position,
                members,
            } => {
                let replica = &mut self.replicas[r];
                let Some(writing) = replica.writes.get_mut(&write) else {
                    return;
                };
                if writing.wait.is_none() {
                    let wait = replica.trust.begin_write(now, write, position, &members);
                    let deadline = wait.deadline();
                    writing.wait = Some(wait);
                    let incarnation = replica.incarnation;
                    let real = self.after(r, deadline.saturating_duration_since(now));
                    self.at(real, Some((r, incarnation)), Ev::Deadline { write });
                }
                self.maybe_answer(r, write, now);
            }
            Ev::Deadline { write } => self.maybe_answer(r, write, now),
            Ev::Pause { until } => self.replicas[r].paused_until = until,
            Ev::Crash => {
                let replica = &mut self.replicas[r];
                replica.alive = false;
                replica.incarnation += 1;
                let back = self.now + self.rng.between(1, 1_500_000);
                self.at(back, Some((r, u64::MAX)), Ev::Start);
            }
            Ev::Start => {
                let member = self.rng.next();
                let replica = &mut self.replicas[r];
                replica.alive = true;
                replica.trust = Trust::new(self.rules, member);
                replica.entries.clear();
                replica.writes.clear();
                let incarnation = replica.incarnation;
                self.at(self.now + 1, Some((r, incarnation)), Ev::Tick);
            }
            _ => unreachable!("Redis events are addressed to no replica"),
        }
    }

    fn maybe_answer(&mut self, r: usize, write: u64, now: Instant) {
        let replica = &mut self.replicas[r];
        let Some(Writing {
            wait: Some(wait),
            table,
            version,
        }) = replica.writes.get(&write)
        else {
            return;
        };
        if wait.may_answer(now) {
            let (table, version) = (*table, *version);
            replica.writes.remove(&write);
            self.tally.writes += 1;
            self.answered.push(Answered {
                table,
                version,
                at: self.now,
                write,
            });
        }
    }
}
