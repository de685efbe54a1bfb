//! Selling only what a replica holds: after a lease's debit, `WAIT` for one replica's
//! acknowledgement before its units are sold.
//!
//! Redis replicates asynchronously. A master that dies before its replica received a debit
//! takes the debit with it; the replica that takes over still holds the limit (with its epoch,
//! so nothing tells it from the one that died) and sells those units again. `WAIT 1 ms` right
//! after the script, on the same connection (a pipeline: on a cluster the pair goes to the
//! node of the script's keys, where a lone `WAIT` would go to every master), answers how many
//! replicas hold every write of that connection so far: with none in time, the units are not
//! sold (they stay debited: an undersell, never an oversell).
//!
//! Whether to wait is decided per node, from `INFO replication` on the node of the limit's
//! keys ([`Watch`]): read when first needed, every [`REFRESH`], and again after a wait that
//! failed or a command error (a failover shows so). A master once seen with a replica stays
//! waited on as long as it is the same master (its `master_replid`): a replica whose link
//! broke (its master lists it no more) could still be promoted without the latest writes.
//! A promoted replica starts a new replication id, so a new master without replicas of its
//! own sells without waiting.

use std::time::{Duration, Instant};

use crate::sync::Lock;

/// Whether a fleet limiter waits for a replica's acknowledgement of a debit before it sells
/// the debited units (see the README's "Production" section).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use cellgate_redis::{Fleet, Replication};
///
/// let tickets = Fleet::stock("concert", 50_000)
///     .replication(Replication::Required)
///     .replica_wait(Duration::from_millis(50))
///     .connect("redis://10.0.0.1:7000,redis://10.0.0.2:7000,redis://10.0.0.3:7000")?;
/// # Ok::<(), cellgate_redis::FleetError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replication {
    /// The default: wait whenever the master of the limit's keys has (or had, as the same
    /// master) a replica, on one node or in a cluster alike; a master without replicas sells
    /// at once (no replica could take over without its writes).
    #[default]
    Auto,
    /// Always wait: a master without a replica sells nothing new (fail closed).
    Required,
    /// Never wait: a failover to a replica that had not received the latest debits sells
    /// their units again (the behaviour before this setting existed).
    Off,
}

/// How long a reading of `INFO replication` is trusted.
pub(crate) const REFRESH: Duration = Duration::from_secs(5);

/// The default bound on one `WAIT`.
pub(crate) const DEFAULT_REPLICA_WAIT: Duration = Duration::from_millis(100);

/// The replica wait: `set`, or by default [`DEFAULT_REPLICA_WAIT`] within half the command
/// timeout.
pub(crate) fn wait_or_default(set: Option<Duration>, command_timeout: Duration) -> Duration {
    set.unwrap_or(DEFAULT_REPLICA_WAIT.min(command_timeout / 2))
}

/// What a client knows of the replicas of one node (the master of one set of keys).
#[derive(Debug, Clone, Default)]
pub(crate) struct Watch {
    /// The master's replication id when last read.
    replid: String,
    /// That master had at least one replica when read (and stays so while its id holds).
    replicated: bool,
    /// When it was last read (`None`: read before the next command).
    read_at: Option<Instant>,
}

impl Watch {
    /// Whether the next command must wait, or `None` when `INFO replication` must be read
    /// first ([`learn`](Self::learn)).
    pub(crate) fn wait(&self, policy: Replication, now: Instant) -> Option<bool> {
        match policy {
            Replication::Off => Some(false),
            Replication::Required => Some(true),
            Replication::Auto => match self.read_at {
                Some(at) if now.duration_since(at) < REFRESH => Some(self.replicated),
                _ => None,
            },
        }
    }

    /// Takes in a reading of `INFO replication` (`None`: it failed; then the last reading
    /// stands until the next refresh).
    pub(crate) fn learn(&mut self, info: Option<&str>, now: Instant) {
        self.read_at = Some(now);
        let Some((replid, replicas)) = info.and_then(parse) else {
            return;
        };
        if replid != self.replid {
            self.replid = replid;
            self.replicated = replicas > 0;
        } else {
            self.replicated |= replicas > 0;
        }
    }

    /// Reads `INFO replication` again before the next command (after a failed wait or a
    /// command error: maybe another master now).
    pub(crate) fn stale(&mut self) {
        self.read_at = None;
    }
}

/// Where a client keeps the [`Watch`] of one node: in itself (a lease client), or behind a
/// lock its clones share (a keyed client's watch per shard). The lock is taken only inside
/// [`with`](Self::with), so it is never held across an await.
pub(crate) trait WatchSlot {
    /// Runs `f` on the watch.
    fn with<R>(&mut self, f: impl FnOnce(&mut Watch) -> R) -> R;
}

impl WatchSlot for Watch {
    fn with<R>(&mut self, f: impl FnOnce(&mut Watch) -> R) -> R {
        f(self)
    }
}

/// The watch of shard `.1` among the shared watches `.0`.
pub(crate) struct ShardWatch<'a>(pub(crate) &'a Lock<Vec<Watch>>, pub(crate) usize);

impl WatchSlot for ShardWatch<'_> {
    fn with<R>(&mut self, f: impl FnOnce(&mut Watch) -> R) -> R {
        f(&mut self.0.lock()[self.1])
    }
}

/// Whether a script call's writes reached a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replicated {
    /// The call did not wait (its writes need no replica, or its master has none).
    NotAsked,
    /// A replica acknowledged every write of the call's connection so far.
    Acked,
    /// The call waited and no replica acknowledged it within the replica wait.
    Unacked,
}

impl Replicated {
    /// Whether the units the call took must not be sold: it had to reach a replica and none
    /// acknowledged it, or its answer was a `repeated` one (the first execution's writes,
    /// which this call's wait cannot vouch for).
    pub(crate) fn unsold(self, repeated: bool) -> bool {
        match self {
            Replicated::NotAsked => false,
            Replicated::Acked => repeated,
            Replicated::Unacked => true,
        }
    }
}

/// The replication id and the number of replicas of a master, from the text of `INFO
/// replication`; `None` for a text without them.
///
/// # Examples
///
/// ```ignore
/// let info = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
///             master_replid:8c1e\r\n";
/// assert_eq!(parse(info), Some(("8c1e".to_owned(), 1)));
/// ```
fn parse(info: &str) -> Option<(String, u64)> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let replicas = field("connected_slaves")?.parse().ok()?;
    Some((field("master_replid")?.to_owned(), replicas))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
        slave0:ip=127.0.0.1,port=7001,state=online,offset=42,lag=0\r\n\
        master_replid:aaaa\r\nmaster_replid2:0000\r\n";

    #[test]
    fn a_master_with_a_replica_is_waited_on_until_it_is_another_master() {
        let now = Instant::now();
        let mut w = Watch::default();
        assert_eq!(w.wait(Replication::Auto, now), None);
        w.learn(Some(ONE), now);
        assert_eq!(w.wait(Replication::Auto, now), Some(true));
        // Its replica's link broke: the same master stays waited on.
        w.learn(
            Some(&ONE.replace("connected_slaves:1", "connected_slaves:0")),
            now,
        );
        assert_eq!(w.wait(Replication::Auto, now), Some(true));
        // A promoted replica, without replicas of its own: no wait.
        let other = ONE
            .replace("connected_slaves:1", "connected_slaves:0")
            .replace("aaaa", "bbbb");
        w.learn(Some(&other), now);
        assert_eq!(w.wait(Replication::Auto, now), Some(false));
        // Unreadable: the last reading stands; stale: read again.
        w.learn(None, now);
        assert_eq!(w.wait(Replication::Auto, now), Some(false));
        w.stale();
        assert_eq!(w.wait(Replication::Auto, now), None);
        assert_eq!(w.wait(Replication::Auto, now + REFRESH), None);
        assert_eq!(w.wait(Replication::Required, now), Some(true));
        assert_eq!(w.wait(Replication::Off, now), Some(false));
    }

    #[test]
    fn only_an_acknowledged_first_answer_is_sold() {
        assert!(!Replicated::NotAsked.unsold(true));
        assert!(!Replicated::Acked.unsold(false));
        assert!(Replicated::Acked.unsold(true));
        assert!(Replicated::Unacked.unsold(false));
    }

    #[test]
    fn parse_reads_the_replid_and_the_replicas() {
        assert_eq!(parse(ONE), Some(("aaaa".to_owned(), 1)));
        assert_eq!(parse("role:master\r\n"), None);
    }
}
