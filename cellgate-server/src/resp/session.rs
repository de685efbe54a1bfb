//! One connection's state and the commands that read or change it, answered as Redis 7 does.

use bytes::Bytes;

use super::introspect;
use super::reply::{Out, Proto};
use super::table::{self, truncated};
use super::throttle;
use super::Shared;

/// What the connection does after a command.
#[derive(Debug)]
pub(crate) enum After {
    Continue,
    /// Send what was written, then close (`QUIT`).
    Close,
    /// Await this `CL.THROTTLE` check on Redis, then write its reply with
    /// [`Session::throttled`] before the next command's.
    #[cfg(feature = "server")]
    Wait(crate::fleet::Cold),
}

/// The state `HELLO`, `CLIENT` and `RESET` act on.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) proto: Proto,
    pub(crate) id: u64,
    pub(crate) name: Option<Bytes>,
}

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";

impl Session {
    pub(crate) fn new(id: u64) -> Self {
        Self {
            proto: Proto::Resp2,
            id,
            name: None,
        }
    }

    /// Writes the reply of a `CL.THROTTLE` call that waited (see [`After::Wait`]).
    #[cfg(feature = "server")]
    pub(crate) fn throttled(&self, r: &throttle::Reply, buf: &mut Vec<u8>) {
        five(
            r,
            &mut Out {
                buf,
                proto: self.proto,
            },
        );
    }

    /// Runs one command (`args` is never empty), writing its reply into `buf`.
    pub(crate) fn execute(&mut self, shared: &Shared, args: &[Bytes], buf: &mut Vec<u8>) -> After {
        let mut out = Out {
            buf,
            proto: self.proto,
        };
        let Some(spec) = table::find(&args[0]) else {
            out.error(&unknown_command(args));
            return After::Continue;
        };
        if !spec.arity_ok(args.len()) {
            out.error(&format!(
                "ERR wrong number of arguments for '{}' command",
                spec.name
            ));
            return After::Continue;
        }
        match spec.name {
            "cl.throttle" => return cl_throttle(shared, args, &mut out),
            "ping" => match args.get(1) {
                None => out.simple("PONG"),
                Some(msg) if args.len() == 2 => out.bulk(msg),
                Some(_) => out.error("ERR wrong number of arguments for 'ping' command"),
            },
            "echo" => out.bulk(&args[1]),
            "hello" => self.hello(shared, args, &mut out),
            "auth" => auth(args, &mut out),
            "client" => self.client(args, &mut out),
            "select" => match super::decode::parse_i64(&args[1]) {
                None => out.error(NOT_AN_INTEGER),
                Some(0) => out.simple("OK"),
                Some(_) => out.error("ERR DB index is out of range"),
            },
            "quit" => {
                out.simple("OK");
                return After::Close;
            }
            "reset" => {
                self.proto = Proto::Resp2;
                self.name = None;
                out.simple("RESET");
            }
            "command" => introspect::command(args, &mut out),
            "config" => introspect::config(args, &mut out),
            "info" => introspect::info(shared, &mut out),
            _ => out.error(&unknown_command(args)),
        }
        After::Continue
    }

    fn hello(&mut self, shared: &Shared, args: &[Bytes], out: &mut Out<'_>) {
        let mut proto = None;
        if let Some(v) = args.get(1) {
            match super::decode::parse_i64(v) {
                None => return out.error("ERR Protocol version is not an integer or out of range"),
                Some(2) => proto = Some(Proto::Resp2),
                Some(3) => proto = Some(Proto::Resp3),
                Some(_) => return out.error("NOPROTO unsupported protocol version"),
            }
        }
        let mut name = None;
        let mut j = 2;
        while j < args.len() {
            let more = args.len() - 1 - j;
            let opt = &args[j];
            if opt.eq_ignore_ascii_case(b"auth") && more >= 2 {
                if !auth_ok(&args[j + 1]) {
                    return out.error(WRONGPASS);
                }
                j += 3;
            } else if opt.eq_ignore_ascii_case(b"setname") && more >= 1 {
                name = Some(args[j + 1].clone());
                j += 2;
            } else {
                return out.error(&format!(
                    "ERR Syntax error in HELLO option '{}'",
                    truncated(opt, 128)
                ));
            }
        }
        if let Some(name) = name {
            if !valid_name(&name) {
                return out.error(BAD_NAME);
            }
            self.name = (!name.is_empty()).then_some(name);
        }
        if let Some(p) = proto {
            self.proto = p;
            out.proto = p;
        }
        introspect::hello(shared, self.proto, self.id, out);
    }

    fn client(&mut self, args: &[Bytes], out: &mut Out<'_>) {
        if let Some(err) = table::check_subcommand("client", args) {
            return out.error(&err);
        }
        let sub = &args[1];
        if sub.eq_ignore_ascii_case(b"setname") {
            if !valid_name(&args[2]) {
                return out.error(BAD_NAME);
            }
            self.name = (!args[2].is_empty()).then(|| args[2].clone());
            out.simple("OK");
        } else if sub.eq_ignore_ascii_case(b"getname") {
            match &self.name {
                Some(n) => out.bulk(n),
                None => out.null(),
            }
        } else if sub.eq_ignore_ascii_case(b"setinfo") {
            let attr = &args[2];
            if !attr.eq_ignore_ascii_case(b"lib-name") && !attr.eq_ignore_ascii_case(b"lib-ver") {
                return out.error(&format!(
                    "ERR Unrecognized option '{}'",
                    truncated(attr, 128)
                ));
            }
            if !valid_name(&args[3]) {
                return out.error(&format!(
                    "ERR {} cannot contain spaces, newlines or special characters.",
                    truncated(attr, 16).to_ascii_lowercase()
                ));
            }
            // Kept by Redis for `CLIENT INFO`, which this listener does not serve.
            out.simple("OK");
        } else {
            // `id`: the only other subcommand `check_subcommand` lets through.
            out.int(i64::try_from(self.id).unwrap_or(i64::MAX));
        }
    }
}

const BAD_NAME: &str = "ERR Client names cannot contain spaces, newlines or special characters.";

/// Redis's rule for client names and library info: printable ASCII without spaces.
fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

/// Without ACL users, only `default` exists and it takes any password (Redis's `nopass`).
fn auth_ok(user: &[u8]) -> bool {
    user == b"default"
}

fn auth(args: &[Bytes], out: &mut Out<'_>) {
    match args.len() {
        2 => out.error(
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ),
        3 if auth_ok(&args[1]) => out.simple("OK"),
        3 => out.error(WRONGPASS),
        _ => out.error("ERR syntax error"),
    }
}

/// Redis's reply to a command it does not know: its name and up to 128 bytes of arguments.
pub(crate) fn unknown_command(args: &[Bytes]) -> String {
    let mut listed = String::new();
    for arg in &args[1..] {
        if listed.len() >= 128 {
            break;
        }
        let room = 128 - listed.len();
        listed.push('\'');
        listed.push_str(&truncated(arg, room));
        listed.push_str("' ");
    }
    format!(
        "ERR unknown command '{}', with args beginning with: {}",
        truncated(&args[0], 128),
        listed
    )
}

fn cl_throttle(shared: &Shared, args: &[Bytes], out: &mut Out<'_>) -> After {
    if args.len() != 5 && args.len() != 6 {
        out.error(throttle::USAGE);
        return After::Continue;
    }
    let params = match throttle::parse(&args[2..]) {
        Ok(p) => p,
        Err(e) => {
            out.error(&e);
            return After::Continue;
        }
    };
    #[cfg(feature = "server")]
    if let Some(fleet) = &shared.fleet {
        match fleet.throttle(&args[1], &params) {
            Ok(crate::fleet::Throttled::Now(r)) => five(&r, out),
            Ok(crate::fleet::Throttled::Wait(cold)) => return After::Wait(cold),
            Err(e) => out.error(&e),
        }
        return After::Continue;
    }
    match throttle::throttle(&shared.limiter, &args[1], &params) {
        Ok(r) => five(&r, out),
        Err(throttle::Refusal::KeyCap) => out.error(
            "Cell error: the key cap (max_keys) is reached by keys that all hold a backlog; \
             retry when some drain",
        ),
    }
    After::Continue
}

/// The five integers of a `CL.THROTTLE` reply.
fn five(r: &throttle::Reply, out: &mut Out<'_>) {
    out.array(5);
    out.int(i64::from(r.limited));
    out.int(r.limit);
    out.int(r.remaining);
    out.int(r.retry_after);
    out.int(r.reset_after);
}
