//! What clients ask about the server: `HELLO`'s map, `COMMAND`, `CONFIG GET`, `INFO`.

use bytes::Bytes;

use super::reply::{Out, Proto};
use super::table::{self, Spec, COMMANDS};
use super::Shared;

/// The Redis version reported to clients: the one whose replies this listener reproduces
/// (clients gate features on it).
pub(crate) const REDIS_VERSION: &str = "7.0.15";

/// `HELLO`'s reply: Redis's seven fields, and redis-cell listed as a loaded module so that
/// clients checking for it find it.
/// `proto` and `id` are the connection's protocol and client id.
pub(crate) fn hello(_shared: &Shared, proto: Proto, id: u64, out: &mut Out<'_>) {
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(match proto {
        Proto::Resp2 => 2,
        Proto::Resp3 => 3,
    });
    out.bulk(b"id");
    out.int(i64::try_from(id).unwrap_or(i64::MAX));
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(1);
    out.map(4);
    out.bulk(b"name");
    out.bulk(b"redis-cell");
    out.bulk(b"ver");
    out.int(1);
    out.bulk(b"path");
    out.bulk(b"cellgate-server");
    out.bulk(b"args");
    out.array(0);
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name...`, `COMMAND DOCS [name...]`.
pub(crate) fn command(args: &[Bytes], out: &mut Out<'_>) {
    if args.len() == 1 {
        out.array(COMMANDS.len());
        COMMANDS.iter().for_each(|s| info_entry(s, out));
        return;
    }
    if let Some(err) = table::check_subcommand("command", args) {
        return out.error(&err);
    }
    let sub = &args[1];
    if sub.eq_ignore_ascii_case(b"count") {
        out.int(i64::try_from(COMMANDS.len()).unwrap_or(i64::MAX));
    } else if sub.eq_ignore_ascii_case(b"info") {
        out.array(args.len() - 2);
        for name in &args[2..] {
            match table::find(name) {
                Some(s) => info_entry(s, out),
                None => out.null(),
            }
        }
    } else {
        // `docs`: unknown names are left out, as Redis does.
        let specs: Vec<&Spec> = if args.len() == 2 {
            COMMANDS.iter().collect()
        } else {
            args[2..].iter().filter_map(|n| table::find(n)).collect()
        };
        out.map(specs.len());
        for s in specs {
            out.bulk(s.name.as_bytes());
            out.map(3);
            out.bulk(b"summary");
            out.bulk(s.summary.as_bytes());
            out.bulk(b"since");
            out.bulk(s.since.as_bytes());
            out.bulk(b"group");
            out.bulk(s.group.as_bytes());
        }
    }
}

/// One command's `COMMAND INFO` entry: Redis 7's ten fields.
fn info_entry(s: &Spec, out: &mut Out<'_>) {
    out.array(10);
    out.bulk(s.name.as_bytes());
    out.int(s.arity);
    out.set(s.flags.len());
    s.flags.iter().for_each(|f| out.simple(f));
    out.int(s.keys.0);
    out.int(s.keys.1);
    out.int(s.keys.2);
    out.set(s.acl.len());
    s.acl.iter().for_each(|c| out.simple(c));
    out.set(0); // tips
    out.array(0); // key specifications
    out.array(0); // subcommands
}

/// The configuration parameters `CONFIG GET` knows: what redis-benchmark and clients ask, with
/// the values that describe this server (nothing is saved or appended to disk; one database).
const PARAMS: &[(&str, &str)] = &[
    ("save", ""),
    ("appendonly", "no"),
    ("databases", "1"),
    ("maxmemory", "0"),
];

/// `CONFIG GET pattern...` (glob patterns with `*` and `?`, any case).
pub(crate) fn config(args: &[Bytes], out: &mut Out<'_>) {
    if let Some(err) = table::check_subcommand("config", args) {
        return out.error(&err);
    }
    let found: Vec<&(&str, &str)> = PARAMS
        .iter()
        .filter(|(name, _)| args[2..].iter().any(|p| glob(p, name.as_bytes())))
        .collect();
    out.map(found.len());
    for (name, value) in found {
        out.bulk(name.as_bytes());
        out.bulk(value.as_bytes());
    }
}

/// A case-insensitive glob match with `*` and `?` (iterative, so no pattern recurses).
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c.eq_ignore_ascii_case(&name[n]) => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// `INFO`: a minimal server section and the keyspace (keys currently held).
pub(crate) fn info(shared: &Shared, out: &mut Out<'_>) {
    let text = format!(
        "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\n\
         cellgate_server_version:{}\r\nmultiplexing_api:tokio\r\n\r\n\
         # Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n\
         # Keyspace\r\ndb0:keys={},expires={},avg_ttl=0\r\n",
        env!("CARGO_PKG_VERSION"),
        shared.connected(),
        shared.config.max_connections,
        shared.limiter.len(),
        shared.limiter.len(),
    );
    out.text(&text);
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn globs() {
        assert!(glob(b"save", b"save"));
        assert!(glob(b"SAVE", b"save"));
        assert!(glob(b"*", b"save"));
        assert!(glob(b"app*", b"appendonly"));
        assert!(glob(b"*only", b"appendonly"));
        assert!(glob(b"s?ve", b"save"));
        assert!(!glob(b"sav", b"save"));
        assert!(!glob(b"x*", b"save"));
    }
}
