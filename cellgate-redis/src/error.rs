//! What can go wrong between a process and its fleet's Redis.

/// An error from the fleet mode: a bad configuration, or Redis not answering as it should.
///
/// # Examples
///
/// ```
/// use cellgate_redis::{Fleet, FleetError};
///
/// let err = Fleet::stock("bad{name}", 10).connect("redis://127.0.0.1:1").unwrap_err();
/// assert!(matches!(err, FleetError::Config(_)));
/// ```
#[derive(Debug)]
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
}

impl std::fmt::Display for FleetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FleetError::Config(m) => write!(f, "invalid fleet configuration: {m}"),
            FleetError::Redis(e) => write!(f, "redis: {e}"),
            FleetError::Timeout => f.write_str("redis did not answer in time"),
            FleetError::Protocol(m) => write!(f, "unexpected reply from redis: {m}"),
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

impl From<redis::RedisError> for FleetError {
    fn from(e: redis::RedisError) -> Self {
        FleetError::Redis(e)
    }
}
