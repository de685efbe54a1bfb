//! Writes replies in the connection's protocol (RESP2 or RESP3) into the batch's output buffer.
//!
//! Replies are written straight into bytes, without building a frame tree first: the hot reply
//! (`CL.THROTTLE`'s five integers) is a few appends. RESP3's map and null degrade to RESP2's
//! flat array and null bulk string, as Redis does.

/// The protocol a connection speaks (`HELLO` switches it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    Resp2,
    Resp3,
}

/// An output buffer for one batch of replies.
pub(crate) struct Out<'a> {
    pub(crate) buf: &'a mut Vec<u8>,
    pub(crate) proto: Proto,
}

impl Out<'_> {
    pub(crate) fn simple(&mut self, s: &str) {
        self.line(b'+', s.as_bytes());
    }

    /// An error reply; `msg` starts with its code (`ERR ...`). Line breaks become spaces, as in
    /// Redis, so that client-supplied text cannot break the framing.
    pub(crate) fn error(&mut self, msg: &str) {
        self.buf.push(b'-');
        self.buf.extend(
            msg.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.buf.extend_from_slice(b"\r\n");
    }

    pub(crate) fn int(&mut self, v: i64) {
        let mut n = itoa::Buffer::new();
        self.line(b':', n.format(v).as_bytes());
    }

    pub(crate) fn bulk(&mut self, data: &[u8]) {
        self.len_header(b'$', data.len());
        self.buf.extend_from_slice(data);
        self.buf.extend_from_slice(b"\r\n");
    }

    pub(crate) fn null(&mut self) {
        match self.proto {
            Proto::Resp2 => self.buf.extend_from_slice(b"$-1\r\n"),
            Proto::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    pub(crate) fn array(&mut self, len: usize) {
        self.len_header(b'*', len);
    }

    /// A map of `len` pairs (RESP2: a flat array of `2 * len` items). Each pair follows as a
    /// key then a value.
    pub(crate) fn map(&mut self, len: usize) {
        match self.proto {
            Proto::Resp2 => self.len_header(b'*', len * 2),
            Proto::Resp3 => self.len_header(b'%', len),
        }
    }

    /// A set of `len` items (RESP2: an array).
    pub(crate) fn set(&mut self, len: usize) {
        match self.proto {
            Proto::Resp2 => self.len_header(b'*', len),
            Proto::Resp3 => self.len_header(b'~', len),
        }
    }

    /// A status reply whose RESP3 form is a verbatim string in Redis (`INFO`); both protocols
    /// accept a bulk string, which is what Redis sends under RESP2.
    pub(crate) fn text(&mut self, s: &str) {
        self.bulk(s.as_bytes());
    }

    fn len_header(&mut self, kind: u8, len: usize) {
        let mut n = itoa::Buffer::new();
        self.line(kind, n.format(len).as_bytes());
    }

    fn line(&mut self, kind: u8, body: &[u8]) {
        self.buf.push(kind);
        self.buf.extend_from_slice(body);
        self.buf.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_and_nulls_follow_the_protocol() {
        let mut buf = Vec::new();
        let mut out = Out {
            buf: &mut buf,
            proto: Proto::Resp2,
        };
        out.map(1);
        out.bulk(b"a");
        out.int(-1);
        out.null();
        out.error("ERR a\r\nb");
        assert_eq!(buf, b"*2\r\n$1\r\na\r\n:-1\r\n$-1\r\n-ERR a  b\r\n");
        let mut buf = Vec::new();
        let mut out = Out {
            buf: &mut buf,
            proto: Proto::Resp3,
        };
        out.map(1);
        out.simple("OK");
        out.null();
        out.set(0);
        assert_eq!(buf, b"%1\r\n+OK\r\n_\r\n~0\r\n");
    }
}
