//! envoyproxy/ratelimit's Redis settings as the URL list the fleet connects with, so that a
//! deployment's environment works unchanged: `REDIS_URL` as `host:port` (or a Unix socket's
//! path, or already a URL), `REDIS_TYPE` (`SINGLE`, `CLUSTER`), `REDIS_SOCKET_TYPE` (`tcp`,
//! `unix`), `REDIS_AUTH` (`password` or `user:password`) and `REDIS_TLS`.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// ratelimit's Redis settings, as its environment (or the flags beside it) gives them.
///
/// # Examples
///
/// ```
/// use cellgate_server::fleet::RatelimitRedis;
/// let r = RatelimitRedis { url: "redis:6379", socket_type: Some("tcp"), ..Default::default() };
/// assert_eq!(r.fleet_url().as_deref(), Ok("redis://redis:6379"));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RatelimitRedis<'a> {
    /// `REDIS_URL`: an address (`host:port`, or a socket's path), several comma-separated
    /// (a cluster's seed nodes), or URLs (`redis://`, `rediss://`, `redis+unix://`).
    pub url: &'a str,
    /// `REDIS_TYPE`: `SINGLE` or `CLUSTER`, any case (none: a cluster when several addresses).
    pub redis_type: Option<&'a str>,
    /// `REDIS_SOCKET_TYPE`: `tcp` or `unix` (none: `unix` for a path starting with `/`).
    pub socket_type: Option<&'a str>,
    /// `REDIS_AUTH`: `password`, or `user:password` for an ACL user.
    pub auth: Option<&'a str>,
    /// `REDIS_TLS`: TLS to every address (`rediss://`).
    pub tls: bool,
}

/// Whether `url` reaches Redis through a Unix socket (redis-rs's two schemes for it).
pub(crate) fn is_unix(url: &str) -> bool {
    url.starts_with("redis+unix://") || url.starts_with("unix://")
}

/// What a URL's user name and password may hold as they are (RFC 3986's unreserved
/// characters); everything else is percent-encoded.
const USERINFO: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

impl RatelimitRedis<'_> {
    /// The fleet's Redis URL: one, or a Redis Cluster's seed nodes separated by commas.
    ///
    /// # Errors
    ///
    /// What ratelimit would refuse (an unknown `REDIS_TYPE` or `REDIS_SOCKET_TYPE`), what is
    /// not supported (`REDIS_TYPE=SENTINEL`, TLS over a Unix socket, a cluster on Unix
    /// sockets), an address that is not `host:port`, and settings that contradict a URL
    /// (`REDIS_AUTH` beside a URL, `REDIS_TLS` with `redis://`).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::fleet::RatelimitRedis;
    /// let r = RatelimitRedis {
    ///     url: "10.0.0.1:6379,10.0.0.2:6379",
    ///     redis_type: Some("CLUSTER"),
    ///     auth: Some("app:s3cret"),
    ///     ..Default::default()
    /// };
    /// assert_eq!(
    ///     r.fleet_url().as_deref(),
    ///     Ok("redis://app:s3cret@10.0.0.1:6379,redis://app:s3cret@10.0.0.2:6379")
    /// );
    /// ```
    pub fn fleet_url(&self) -> Result<String, String> {
        let entries: Vec<&str> = self
            .url
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if entries.is_empty() {
            return Err("REDIS_URL (--redis) names no address".to_owned());
        }
        let cluster = match self.redis_type.map(str::to_ascii_lowercase).as_deref() {
            None => entries.len() > 1,
            Some("single") if entries.len() > 1 => {
                return Err(format!(
                    "REDIS_TYPE=SINGLE takes one address, and REDIS_URL gives {}: several \
                     addresses are a Redis Cluster's seed nodes (REDIS_TYPE=CLUSTER)",
                    entries.len()
                ))
            }
            Some("single") => false,
            Some("cluster") => true,
            Some("sentinel") => {
                return Err(
                    "REDIS_TYPE=SENTINEL is not supported: give the master's address \
                            (REDIS_TYPE=SINGLE) or a Redis Cluster's seed nodes \
                            (REDIS_TYPE=CLUSTER)"
                        .to_owned(),
                )
            }
            Some(_) => {
                return Err(format!(
                    "REDIS_TYPE={}: not SINGLE, CLUSTER or SENTINEL",
                    self.redis_type.unwrap_or_default()
                ))
            }
        };
        let urls = entries
            .iter()
            .map(|e| self.entry_url(e))
            .collect::<Result<Vec<_>, _>>()?;
        if cluster && urls.iter().any(|u| is_unix(u)) {
            return Err("a Redis Cluster is reached over TCP: give its nodes as host:port".into());
        }
        if cluster && urls.len() == 1 {
            // The fleet takes a cluster from several seeds; one seed named twice is still that
            // seed (the client asks it for the cluster's slots).
            return Ok(format!("{0},{0}", urls[0]));
        }
        Ok(urls.join(","))
    }

    /// One address as a URL.
    fn entry_url(&self, entry: &str) -> Result<String, String> {
        if entry.contains("://") {
            if self.auth.is_some() {
                return Err(format!(
                    "REDIS_AUTH applies to host:port addresses, and {entry:?} is a URL: put the \
                     credentials in it (redis://user:password@host:port)"
                ));
            }
            if self.tls && entry.starts_with("redis://") {
                return Err(format!(
                    "REDIS_TLS=true with {entry:?}: a TLS URL is rediss://"
                ));
            }
            return Ok(entry.to_owned());
        }
        let unix = match self.socket_type.map(str::to_ascii_lowercase).as_deref() {
            None => entry.starts_with('/'),
            Some("unix") => true,
            Some("tcp") => false,
            Some(_) => {
                return Err(format!(
                    "REDIS_SOCKET_TYPE={}: not tcp or unix",
                    self.socket_type.unwrap_or_default()
                ))
            }
        };
        let (user, pass) = match self.auth {
            Some(a) => match a.split_once(':') {
                Some((u, p)) => (Some(u), Some(p)),
                None => (None, Some(a)),
            },
            None => (None, None),
        };
        let enc = |s: &str| utf8_percent_encode(s, USERINFO).to_string();
        if unix {
            if self.tls {
                return Err("REDIS_TLS over a Unix socket is not supported".to_owned());
            }
            let query: Vec<String> = user
                .map(|u| format!("user={}", enc(u)))
                .into_iter()
                .chain(pass.map(|p| format!("pass={}", enc(p))))
                .collect();
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            return Ok(format!("redis+unix://{entry}{query}"));
        }
        let port_ok = entry
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok || entry.contains('/') || entry.contains('@') {
            return Err(format!(
                "REDIS_URL address {entry:?} is not host:port (or a URL, or a Unix socket's path \
                 with REDIS_SOCKET_TYPE=unix)"
            ));
        }
        let userinfo = match (user, pass) {
            (Some(u), Some(p)) => format!("{}:{}@", enc(u), enc(p)),
            (None, Some(p)) => format!(":{}@", enc(p)),
            _ => String::new(),
        };
        let scheme = if self.tls { "rediss" } else { "redis" };
        Ok(format!("{scheme}://{userinfo}{entry}"))
    }
}

#[cfg(test)]
mod tests {
    use super::RatelimitRedis;

    fn url(r: RatelimitRedis<'_>) -> Result<String, String> {
        r.fleet_url()
    }

    const BASE: RatelimitRedis<'static> = RatelimitRedis {
        url: "",
        redis_type: None,
        socket_type: None,
        auth: None,
        tls: false,
    };

    #[test]
    fn ratelimits_tcp_addresses_become_urls() {
        let r = RatelimitRedis {
            url: "redis:6379",
            socket_type: Some("tcp"),
            ..BASE
        };
        assert_eq!(url(r).as_deref(), Ok("redis://redis:6379"));
        // Without REDIS_SOCKET_TYPE an address that is no path is TCP.
        let r = RatelimitRedis {
            url: "10.1.2.3:7000",
            ..BASE
        };
        assert_eq!(url(r).as_deref(), Ok("redis://10.1.2.3:7000"));
        let r = RatelimitRedis {
            url: "[::1]:6379",
            tls: true,
            ..BASE
        };
        assert_eq!(url(r).as_deref(), Ok("rediss://[::1]:6379"));
    }

    #[test]
    fn auth_is_a_password_or_a_user_and_password_encoded() {
        let r = RatelimitRedis {
            url: "h:1",
            auth: Some("p@ss:w/rd"),
            ..BASE
        };
        // `user:password` split at the first colon, as ratelimit does.
        assert_eq!(url(r).as_deref(), Ok("redis://p%40ss:w%2Frd@h:1"));
        let r = RatelimitRedis {
            url: "h:1",
            auth: Some("s3cret"),
            ..BASE
        };
        assert_eq!(url(r).as_deref(), Ok("redis://:s3cret@h:1"));
    }

    #[test]
    fn unix_sockets_take_the_password_in_the_query() {
        let r = RatelimitRedis {
            url: "/var/run/redis.sock",
            auth: Some("app:x y"),
            ..BASE
        };
        assert_eq!(
            url(r).as_deref(),
            Ok("redis+unix:///var/run/redis.sock?user=app&pass=x%20y")
        );
        let r = RatelimitRedis {
            url: "/r.sock",
            tls: true,
            ..BASE
        };
        assert!(url(r).is_err());
    }

    #[test]
    fn cluster_and_single_follow_redis_type() {
        let two = RatelimitRedis {
            url: "a:1, b:2",
            ..BASE
        };
        assert_eq!(url(two).as_deref(), Ok("redis://a:1,redis://b:2"));
        let one_seed = RatelimitRedis {
            url: "a:1",
            redis_type: Some("cluster"),
            ..BASE
        };
        assert_eq!(url(one_seed).as_deref(), Ok("redis://a:1,redis://a:1"));
        let single_two = RatelimitRedis {
            redis_type: Some("SINGLE"),
            ..two
        };
        assert!(url(single_two).unwrap_err().contains("REDIS_TYPE=CLUSTER"));
        let sentinel = RatelimitRedis {
            url: "mymaster,s1:26379,s2:26379",
            redis_type: Some("SENTINEL"),
            ..BASE
        };
        assert!(url(sentinel)
            .unwrap_err()
            .contains("SENTINEL is not supported"));
        let other = RatelimitRedis {
            redis_type: Some("ring"),
            ..two
        };
        assert!(url(other).is_err());
    }

    #[test]
    fn urls_pass_unless_the_settings_contradict_them() {
        let r = RatelimitRedis {
            url: "redis://u:p@h:1/2",
            ..BASE
        };
        assert_eq!(url(r).as_deref(), Ok("redis://u:p@h:1/2"));
        let auth = RatelimitRedis {
            auth: Some("x"),
            ..r
        };
        assert!(url(auth).unwrap_err().contains("REDIS_AUTH"));
        let tls = RatelimitRedis { tls: true, ..r };
        assert!(url(tls).unwrap_err().contains("rediss://"));
    }

    #[test]
    fn what_is_not_an_address_is_refused() {
        for bad in ["redis", "h:port", ":6379", "h:99999", "u@h:1", ""] {
            let r = RatelimitRedis {
                url: bad,
                socket_type: Some("tcp"),
                ..BASE
            };
            assert!(url(r).is_err(), "{bad:?}");
        }
        let r = RatelimitRedis {
            url: "h:1",
            socket_type: Some("udp"),
            ..BASE
        };
        assert!(url(r).is_err());
    }
}
