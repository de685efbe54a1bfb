//! The commands the listener knows, with the metadata Redis reports for them (`COMMAND`,
//! `COMMAND INFO`, `COMMAND DOCS`) and uses to check their arity.

/// One command's metadata, in Redis's terms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    /// Lowercase name.
    pub(crate) name: &'static str,
    /// Redis's arity: `n > 0` exactly `n` arguments (name included), `-n` at least `n`.
    pub(crate) arity: i64,
    pub(crate) flags: &'static [&'static str],
    /// First key, last key, step (0 when the command takes no key).
    pub(crate) keys: (i64, i64, i64),
    pub(crate) acl: &'static [&'static str],
    pub(crate) summary: &'static str,
    pub(crate) since: &'static str,
    pub(crate) group: &'static str,
}

impl Spec {
    /// Whether `argc` arguments (name included) fit the arity.
    pub(crate) fn arity_ok(&self, argc: usize) -> bool {
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        if self.arity > 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }
}

const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    acl: &'static [&'static str],
    summary: &'static str,
    group: &'static str,
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        keys: (0, 0, 0),
        acl,
        summary,
        since: "1.0.0",
        group,
    }
}

const CONN: &[&str] = &["@fast", "@connection"];
const CONN_SLOW: &[&str] = &["@slow", "@connection"];

/// Every command, as `COMMAND` lists them.
pub(crate) const COMMANDS: &[Spec] = &[
    Spec {
        name: "cl.throttle",
        // A module command: redis-cell checks the count itself (its usage error).
        arity: -1,
        flags: &["write"],
        keys: (1, 1, 1),
        acl: &["@write"],
        summary: "Rate-limits a key with GCRA (redis-cell 0.2.2's reply)",
        since: "0.2.2",
        group: "module",
    },
    spec(
        "ping",
        -1,
        &["fast", "sentinel"],
        CONN,
        "Returns the server's liveliness response.",
        "connection",
    ),
    spec(
        "echo",
        2,
        &["fast"],
        CONN,
        "Returns the given string.",
        "connection",
    ),
    spec(
        "hello",
        -1,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "sentinel",
            "allow_busy",
        ],
        CONN,
        "Handshakes with the Redis server.",
        "connection",
    ),
    spec(
        "auth",
        -2,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "sentinel",
            "allow_busy",
        ],
        CONN,
        "Authenticates the connection.",
        "connection",
    ),
    spec(
        "client",
        -2,
        &[],
        CONN_SLOW,
        "A container for client connection commands.",
        "connection",
    ),
    spec(
        "select",
        2,
        &["loading", "stale", "fast"],
        CONN,
        "Changes the selected database.",
        "connection",
    ),
    spec(
        "quit",
        -1,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "allow_busy",
        ],
        CONN,
        "Closes the connection.",
        "connection",
    ),
    spec(
        "reset",
        1,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "allow_busy",
        ],
        CONN,
        "Resets the connection.",
        "connection",
    ),
    spec(
        "command",
        -1,
        &["loading", "stale"],
        &["@slow", "@connection"],
        "Returns detailed information about all commands.",
        "server",
    ),
    spec(
        "config",
        -2,
        &[],
        &["@slow"],
        "A container for server configuration commands.",
        "server",
    ),
    spec(
        "info",
        -1,
        &["loading", "stale"],
        &["@slow", "@dangerous"],
        "Returns information and statistics about the server.",
        "server",
    ),
];

/// The command named `name` (any case).
pub(crate) fn find(name: &[u8]) -> Option<&'static Spec> {
    COMMANDS
        .iter()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Subcommands and their arities (`container|sub`, Redis's arity convention).
pub(crate) const SUBCOMMANDS: &[(&str, &str, i64)] = &[
    ("client", "setname", 3),
    ("client", "getname", 2),
    ("client", "setinfo", 4),
    ("client", "id", 2),
    ("config", "get", -3),
    ("command", "count", 2),
    ("command", "info", -2),
    ("command", "docs", -2),
];

/// Redis's subcommand check: `None` if `args[1]` is a known subcommand with a fitting arity,
/// else the error line.
pub(crate) fn check_subcommand(container: &str, args: &[bytes::Bytes]) -> Option<String> {
    let sub = &args[1];
    let Some(&(_, name, arity)) = SUBCOMMANDS
        .iter()
        .find(|(c, s, _)| *c == container && s.as_bytes().eq_ignore_ascii_case(sub))
    else {
        return Some(format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            truncated(sub, 128),
            container.to_ascii_uppercase()
        ));
    };
    let argc = i64::try_from(args.len()).unwrap_or(i64::MAX);
    let fits = if arity > 0 {
        argc == arity
    } else {
        argc >= -arity
    };
    (!fits).then(|| format!("ERR wrong number of arguments for '{container}|{name}' command"))
}

/// At most `max` bytes of `b`, as text (invalid UTF-8 replaced).
pub(crate) fn truncated(b: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&b[..b.len().min(max)]).into_owned()
}
