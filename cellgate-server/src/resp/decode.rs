//! A bounded, resumable decoder for what clients send: RESP arrays of bulk strings, and inline
//! commands (`PING\r\n`), as Redis accepts them.
//!
//! Hand-written rather than `redis-protocol`'s decoder because that one decodes any frame a
//! *server* may send (nested arrays by recursion, so a deep `*1\r\n*1\r\n…` grows the stack),
//! has no bound on an argument count or a bulk length (it waits for whatever a `$N` header
//! announces), re-parses a partial frame from its start on every read (quadratic under a client
//! that trickles a large command), and has no inline commands. A client only ever sends one
//! shape, so the decoder below is small: it checks every header against [`Limits`] before
//! waiting for or keeping any byte it announces, keeps its place between reads, and hands out
//! each argument as a zero-copy slice of the read buffer.
//!
//! Errors use Redis's wording (`Protocol error: invalid multibulk length`, ...); after one the
//! connection answers it and closes, as Redis does.

use bytes::{Buf, Bytes, BytesMut};

use super::inline;

/// The bounds the decoder enforces (copied from [`RespConfig`](super::RespConfig)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most arguments in one command (the command name counts).
    pub max_args: usize,
    /// Longest bulk string (one argument), bytes.
    pub max_bulk_len: usize,
    /// Longest inline command line, and longest `*N` / `$N` header line, bytes.
    pub max_inline_len: usize,
}

/// One step of decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete command: its arguments, the name first (never empty).
    Command(Vec<Bytes>),
    /// Something Redis skips without a reply: an empty inline line, `*0`, `*-1`.
    Nothing,
}

/// Why the input cannot be decoded: the text of the `-ERR` reply (Redis's words), after which
/// the connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolError(pub &'static str);

impl ProtocolError {
    /// The whole error line, without `-` and CRLF.
    pub fn message(self) -> String {
        format!("ERR Protocol error: {}", self.0)
    }
}

/// A decoder for one connection: it keeps its place inside a partly received command.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    /// Arguments still expected by the array being read (0: between commands).
    pending: usize,
    /// The length announced by the last `$N` header, while its bytes are awaited.
    bulk: Option<usize>,
    args: Vec<Bytes>,
    /// Bytes held in `args` (a partly received command keeps them out of the read buffer).
    held: usize,
}

/// Where a short argument list starts; the vector grows with the arguments that do arrive,
/// never with the count a header announces.
const INITIAL_ARGS: usize = 8;

impl Decoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            pending: 0,
            bulk: None,
            args: Vec::new(),
            held: 0,
        }
    }

    /// Bytes of a partly received command held by the decoder (outside the read buffer).
    pub fn held(&self) -> usize {
        self.held
    }

    /// Whether a command has started and is not complete.
    pub fn mid_command(&self) -> bool {
        self.pending > 0
    }

    /// Decodes the next frame from the front of `buf`, consuming what it uses. `Ok(None)`: more
    /// bytes are needed (what was read so far is kept, in `buf` or in the decoder).
    ///
    /// # Errors
    ///
    /// A [`ProtocolError`] when the input breaks the protocol or a [`Limits`] bound.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        if self.pending == 0 {
            match buf.first() {
                None => return Ok(None),
                Some(b'*') => {
                    let Some(count) = self.header(buf, "too big mbulk count string")? else {
                        return Ok(None);
                    };
                    if count <= 0 {
                        return Ok(Some(Frame::Nothing));
                    }
                    let count = usize::try_from(count)
                        .ok()
                        .filter(|&c| c <= self.limits.max_args)
                        .ok_or(ProtocolError("invalid multibulk length"))?;
                    self.pending = count;
                    self.args = Vec::with_capacity(count.min(INITIAL_ARGS));
                }
                Some(_) => return self.inline(buf),
            }
        }
        self.array_items(buf)
    }

    /// Reads the bulk strings of the array in progress; the command once all have arrived.
    fn array_items(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        while self.pending > 0 {
            let len = match self.bulk {
                Some(len) => len,
                None => {
                    match buf.first() {
                        None => return Ok(None),
                        Some(b'$') => {}
                        Some(&other) => return Err(expected_dollar(other)),
                    }
                    let Some(len) = self.header(buf, "too big bulk count string")? else {
                        return Ok(None);
                    };
                    let len = usize::try_from(len)
                        .ok()
                        .filter(|&l| l <= self.limits.max_bulk_len)
                        .ok_or(ProtocolError("invalid bulk length"))?;
                    self.bulk = Some(len);
                    len
                }
            };
            // The two bytes after the data are its CRLF; Redis skips them unchecked too.
            if buf.len() < len + 2 {
                return Ok(None);
            }
            let arg = buf.split_to(len).freeze();
            buf.advance(2);
            self.bulk = None;
            self.held += arg.len();
            self.args.push(arg);
            self.pending -= 1;
        }
        self.held = 0;
        Ok(Some(Frame::Command(std::mem::take(&mut self.args))))
    }

    /// Parses a `*N` or `$N` header line at the front of `buf` (consumed when complete).
    fn header(
        &self,
        buf: &mut BytesMut,
        too_big: &'static str,
    ) -> Result<Option<i64>, ProtocolError> {
        let Some(end) = find_crlf(buf, self.limits.max_inline_len) else {
            return if buf.len() > self.limits.max_inline_len {
                Err(ProtocolError(too_big))
            } else {
                Ok(None)
            };
        };
        let value = parse_i64(&buf[1..end]);
        let kind = buf[0];
        buf.advance(end + 2);
        match value {
            Some(v) => Ok(Some(v)),
            None if kind == b'*' => Err(ProtocolError("invalid multibulk length")),
            None => Err(ProtocolError("invalid bulk length")),
        }
    }

    /// An inline command: one line of space-separated (optionally quoted) arguments.
    fn inline(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        let window = &buf[..buf.len().min(self.limits.max_inline_len + 1)];
        let Some(nl) = window.iter().position(|&b| b == b'\n') else {
            return if buf.len() > self.limits.max_inline_len {
                Err(ProtocolError("too big inline request"))
            } else {
                Ok(None)
            };
        };
        let line = buf.split_to(nl + 1);
        let line = line[..nl].strip_suffix(b"\r").unwrap_or(&line[..nl]);
        let args = inline::split(line, self.limits.max_args).map_err(ProtocolError)?;
        if args.is_empty() {
            Ok(Some(Frame::Nothing))
        } else {
            Ok(Some(Frame::Command(args)))
        }
    }
}

fn expected_dollar(got: u8) -> ProtocolError {
    // Redis prints the byte it got; a static message per byte class keeps the error `Copy`
    // and free of client-controlled text.
    match got {
        b'*' => ProtocolError("expected '$', got '*'"),
        b'+' => ProtocolError("expected '$', got '+'"),
        b':' => ProtocolError("expected '$', got ':'"),
        b'-' => ProtocolError("expected '$', got '-'"),
        _ => ProtocolError("expected '$', got something else"),
    }
}

/// The index of the `\r` of the first CRLF within the first `max + 2` bytes of `buf`.
fn find_crlf(buf: &[u8], max: usize) -> Option<usize> {
    let window = &buf[..buf.len().min(max + 2)];
    window.windows(2).position(|w| w == b"\r\n")
}

/// Parses a decimal `i64` as Redis's `string2ll` does: an optional `-`, digits, no `+`, no
/// spaces, no leading zeros (except `0` itself), no overflow.
pub(crate) fn parse_i64(s: &[u8]) -> Option<i64> {
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 || (digits[0] == b'0' && digits.len() > 1) {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(d - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    if negative && value == 0 {
        return None;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_args: 8,
        max_bulk_len: 16,
        max_inline_len: 32,
    };

    fn decode_all(input: &[u8]) -> Result<Vec<Frame>, ProtocolError> {
        let mut d = Decoder::new(LIMITS);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(f) = d.decode(&mut buf)? {
            out.push(f);
        }
        Ok(out)
    }

    fn cmd(args: &[&str]) -> Frame {
        Frame::Command(
            args.iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect(),
        )
    }

    #[test]
    fn arrays_and_inline_commands_pipelined() {
        let frames = decode_all(b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING\r\n\r\n*0\r\n").unwrap();
        assert_eq!(
            frames,
            vec![
                cmd(&["ECHO", "hi"]),
                cmd(&["PING"]),
                Frame::Nothing,
                Frame::Nothing
            ]
        );
    }

    #[test]
    fn byte_by_byte_arrival_gives_the_same_command() {
        let input = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n";
        let mut d = Decoder::new(LIMITS);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in input.iter() {
            buf.extend_from_slice(&[b]);
            while let Some(f) = d.decode(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, vec![cmd(&["SET", "k", "hello"])]);
        assert!(!d.mid_command());
    }

    #[test]
    fn headers_over_the_limits_are_refused_before_their_data() {
        assert_eq!(
            decode_all(b"*9\r\n"),
            Err(ProtocolError("invalid multibulk length"))
        );
        assert_eq!(
            decode_all(b"*1\r\n$17\r\n"),
            Err(ProtocolError("invalid bulk length"))
        );
        assert_eq!(
            decode_all(b"*1\r\n$-1\r\n"),
            Err(ProtocolError("invalid bulk length"))
        );
        assert_eq!(
            decode_all(b"*x\r\n"),
            Err(ProtocolError("invalid multibulk length"))
        );
        assert_eq!(
            decode_all(b"*1\r\n:1\r\n"),
            Err(ProtocolError("expected '$', got ':'"))
        );
        assert_eq!(
            decode_all(&[b'A'; 40]),
            Err(ProtocolError("too big inline request"))
        );
        assert_eq!(
            decode_all(&[b'*'; 40]),
            Err(ProtocolError("too big mbulk count string"))
        );
    }

    #[test]
    fn integers_parse_as_redis_does() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"01",
            b"-0",
            b" 1",
            b"1 ",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", bad);
        }
    }
}
