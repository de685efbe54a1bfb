//! Entry points for the fuzz target `resp_decode`: the decoder and the command layer as one
//! connection drives them, without a socket. Not a supported API.

use bytes::{Bytes, BytesMut};

use super::decode::{Decoder, Frame};
use super::reply::Out;
use super::session::{After, Session};
use super::{RespConfig, Shared};

/// Small bounds, so that the fuzzer reaches them.
fn config() -> RespConfig {
    RespConfig {
        max_args: 16,
        max_bulk_len: 256,
        max_inline_len: 256,
        max_keys: 64,
        ..RespConfig::default()
    }
}

/// Feeds `input` to one connection's decoder `chunk` bytes at a time (at least 1), runs every
/// command, and returns every byte the connection would have written.
pub fn process(input: &[u8], chunk: usize) -> Vec<u8> {
    let config = config();
    let limits = config.limits();
    let shared = Shared::new(config).expect("a valid configuration");
    let mut session = Session::new(1);
    let mut decoder = Decoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for part in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(part);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(Frame::Command(args))) => {
                    if matches!(session.execute(&shared, &args, &mut out), After::Close) {
                        return out;
                    }
                }
                Ok(Some(Frame::Nothing)) => {}
                Ok(None) => break,
                Err(e) => {
                    Out {
                        buf: &mut out,
                        proto: session.proto,
                    }
                    .error(&e.message());
                    return out;
                }
            }
        }
    }
    out
}

/// Decodes `input` whole into commands (`None` at a protocol error).
pub fn decode_all(input: &[u8]) -> Option<Vec<Vec<Bytes>>> {
    let mut decoder = Decoder::new(config().limits());
    let mut buf = BytesMut::from(input);
    let mut commands = Vec::new();
    loop {
        match decoder.decode(&mut buf).ok()? {
            Some(Frame::Command(args)) => commands.push(args),
            Some(Frame::Nothing) => {}
            None => return Some(commands),
        }
    }
}

/// The decoder's bounds in [`process`] and [`decode_all`]: (arguments, bulk length).
pub const LIMITS: (usize, usize) = (16, 256);
