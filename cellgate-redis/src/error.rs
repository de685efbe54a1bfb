//! What can go wrong between a process and its fleet's Redis, and what to do about it.

use redis::{ErrorKind, ServerErrorKind};

/// The commands an ACL user needs (the literal behind [`ACL_COMMANDS`], so the hints can
/// name them).
macro_rules! acl_commands {
    () => {
        "+evalsha +eval +script|load +time +hget +hmget +hset +hgetall +hdel +hincrby +hexists +mget +set +del +info +wait"
    };
}

/// The ACL permissions a Redis user needs for the fleet mode ([`Fleet`](crate::Fleet) and
/// [`KeyedFleet`](crate::KeyedFleet)), on the keys `~cellgate:*`: running the scripts
/// (`EVALSHA`, `EVAL` and `SCRIPT LOAD` when the script is not cached yet) and the commands
/// the scripts run (Redis checks those against the user too), and `WAIT` (a lease waits for a
/// replica: [`Replication`](crate::replica::Replication)). `+info` lets a limiter warn when Redis keeps
/// no append-only file and see whether the limit's master has replicas (without it,
/// [`Replication::Auto`](crate::replica::Replication::Auto) does not wait; `Required` still does).
///
/// # Examples
///
/// ```text
/// ACL SETUSER app on >PASSWORD ~cellgate:* +evalsha +eval +script|load +time +hget ...
/// ```
///
/// ```
/// assert!(cellgate_redis::ACL_COMMANDS.contains("+evalsha"));
/// ```
pub const ACL_COMMANDS: &str = acl_commands!();

/// An error from the fleet mode: a bad configuration, or Redis not answering as it should.
///
/// Its `Display` says what to fix for the Redis errors a deployment meets (no or a wrong
/// password, an ACL user without the scripting permissions, a key of the limit's name holding
/// something else, scripting disabled, a replica instead of the master, a URL whose scheme or
/// port is not Redis's: a TLS port reached with `redis://`, a plain one with `rediss://`,
/// another service).
///
/// # Examples
///
/// ```
/// use cellgate_redis::{Fleet, FleetError};
///
/// let err = Fleet::stock("bad{name}", 10).connect("redis://127.0.0.1:1").unwrap_err();
/// assert!(matches!(err, FleetError::Config(_)));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum FleetError {
    /// The configuration is invalid (a name with braces, a zero rate, a bad URL...).
    Config(String),
    /// Redis answered with an error, or the connection failed.
    Redis(redis::RedisError),
    /// Redis did not answer within the command timeout.
    Timeout,
    /// Redis answered something the protocol does not expect.
    Protocol(String),
    /// Redis lost this stock (a restart without persistence, a failover to a replica that had
    /// not received the latest writes) after it was created, so it is not sold afresh: the
    /// limiters sell only what they still hold leased, until an operator resets the limit
    /// (see the README's "Production" section).
    Forgotten,
    /// The master of the limit's keys has replicas and none acknowledged a debit within the
    /// replica wait ([`Replication`](crate::replica::Replication)): its units are not sold (a failover
    /// could lose the debit while they are), and no more are leased until a replica
    /// acknowledges again.
    NotReplicated,
}

impl FleetError {
    /// What to change, for the Redis errors a deployment is known to meet; `None` otherwise.
    ///
    /// ```
    /// use cellgate_redis::FleetError;
    /// assert!(FleetError::Forgotten.hint().unwrap().contains("reset"));
    /// assert!(FleetError::Timeout.hint().unwrap().contains("rediss://"));
    /// assert_eq!(FleetError::Protocol("a reply of 3 values".into()).hint(), None);
    /// ```
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            FleetError::Redis(e) => redis_hint(e),
            FleetError::Forgotten => Some(
                "the limit's state is gone: find out what was really sold, then reset it \
                 (delete its keys and start the processes with what is left, or use a new name)",
            ),
            FleetError::NotReplicated => Some(
                "the replicas of the limit's master do not acknowledge its writes (INFO \
                 replication on that master: a replica down, lagging or disconnected); restore \
                 them, or raise replica_wait, or choose Replication::Off to sell without them",
            ),
            FleetError::Timeout => Some(
                "nothing answered within the command timeout: the host may drop packets (a \
                 firewall), the port may be a Redis without TLS reached with rediss:// (use \
                 redis://), or Redis is overloaded or far away (raise command_timeout)",
            ),
            _ => None,
        }
    }
}

/// The fix for a known Redis error.
fn redis_hint(e: &redis::RedisError) -> Option<&'static str> {
    let detail = e.detail().unwrap_or("").to_ascii_lowercase();
    let code = e.code().unwrap_or("");
    Some(match e.kind() {
        _ if code == "NOAUTH" || detail.contains("unauthenticated") => {
            "Redis requires a password: put it in the URL (redis://:PASSWORD@host:port, or \
             redis://USER:PASSWORD@host:port for an ACL user)"
        }
        _ if code == "WRONGPASS" || e.kind() == ErrorKind::AuthenticationFailed => {
            "Redis refused the user or password in the URL: check them (ACL LIST on the server)"
        }
        _ if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
            || detail.contains("user executing the script can't run") =>
        {
            concat!(
                "the ACL user may not run the fleet's scripts on its keys: ACL SETUSER <user> ~cellgate:* ",
                acl_commands!()
            )
        }
        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask) => {
            "the URL points at one node of a Redis Cluster: give the cluster's seed nodes as \
             comma-separated URLs (redis://host1:port1,redis://host2:port2,...)"
        }
        ErrorKind::Server(ServerErrorKind::ReadOnly) => {
            "the URL points at a read-only replica: point it at the master"
        }
        _ if code == "WRONGTYPE" => {
            "a key of this limit (cellgate:{name}:...) holds another type: something else uses \
             the name in this Redis; pick another name or delete those keys"
        }
        _ if detail.contains("unknown command")
            && (detail.contains("eval") || detail.contains("script")) =>
        {
            "this Redis does not run Lua scripts (EVAL/EVALSHA disabled or renamed): the fleet \
             mode needs them"
        }
        _ if code == "CELLGATE" => {
            "every process must use the same configuration for one limit name (or another name)"
        }
        _ if e.is_connection_refusal() => {
            "nothing listens at the URL's host and port: is Redis running?"
        }
        ErrorKind::Parse => {
            "the server at the URL's host and port does not speak the Redis protocol: another \
             service listens there, or the port serves TLS (use rediss://)"
        }
        _ if e.is_connection_dropped() => {
            "Redis closed the connection: when connecting, the port may serve TLS (use \
             rediss://) or Redis may be at its maxclients limit; during a run, Redis restarted \
             or dropped this client (the limiter reconnects by itself)"
        }
        _ => return None,
    })
}

impl std::fmt::Display for FleetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FleetError::Config(m) => write!(f, "invalid fleet configuration: {m}")?,
            FleetError::Redis(e) => write!(f, "redis: {e}")?,
            FleetError::Timeout => f.write_str("redis did not answer in time")?,
            FleetError::Protocol(m) => write!(f, "unexpected reply from redis: {m}")?,
            FleetError::Forgotten => f.write_str(
                "redis lost this limit after it was created (a restart without persistence, or \
                 a failover to a replica that lagged): it is not sold afresh",
            )?,
            FleetError::NotReplicated => {
                f.write_str("no replica acknowledged a debit in time: its units are not sold")?
            }
        }
        match self.hint() {
            Some(h) => write!(f, " (fix: {h})"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for FleetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FleetError::Redis(e) => Some(e),
            _ => None,
        }
    }
}

/// A Redis error as a fleet error: the fleet script's refusal of a limit Redis forgot is
/// [`FleetError::Forgotten`].
impl From<redis::RedisError> for FleetError {
    fn from(e: redis::RedisError) -> Self {
        if e.code() == Some("CELLGATE_FORGOTTEN") {
            FleetError::Forgotten
        } else {
            FleetError::Redis(e)
        }
    }
}
