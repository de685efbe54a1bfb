//! One client connection: read, decode every complete command in the buffer, answer them in
//! order with one write per batch, and enforce the per-connection limits.

use std::io;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{timeout_at, Instant};

use super::decode::{Decoder, Frame};
use super::reply::Out;
use super::session::{After, Session};
use super::Shared;

/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 16 * 1024;
/// Replies beyond this many bytes are written before the batch's next command is decoded, so
/// a long pipeline never builds one large output buffer.
const MAX_OUT_BATCH: usize = 64 * 1024;

/// Serves one client until it leaves, breaks a limit, or the listener shuts down (then the
/// batch in progress is answered first).
pub(crate) async fn run(
    mut stream: TcpStream,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let cfg = &shared.config;
    let mut session = Session::new(shared.ids.next());
    let mut decoder = Decoder::new(cfg.limits());
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut out: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    // When the command now partly received started arriving.
    let mut partial_since: Option<Instant> = None;
    loop {
        let mut after = After::Continue;
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(Frame::Command(args))) => {
                    after = match session.execute(shared, &args, &mut out) {
                        // A key cold here: its check is awaited in order, on no thread.
                        #[cfg(feature = "server")]
                        After::Wait(cold) => {
                            session.throttled(&cold.answer().await, &mut out);
                            After::Continue
                        }
                        a => a,
                    };
                }
                Ok(Some(Frame::Nothing)) => {}
                Ok(None) => break,
                Err(e) => {
                    let mut o = Out {
                        buf: &mut out,
                        proto: session.proto,
                    };
                    o.error(&e.message());
                    after = After::Close;
                }
            }
            if matches!(after, After::Close) {
                break;
            }
            if out.len() >= MAX_OUT_BATCH {
                write(&mut stream, &mut out, cfg.command_timeout).await?;
            }
        }
        write(&mut stream, &mut out, cfg.command_timeout).await?;
        if matches!(after, After::Close) {
            return Ok(());
        }
        if decoder.held() + buf.len() >= cfg.max_query_bytes {
            let mut o = Out {
                buf: &mut out,
                proto: session.proto,
            };
            o.error("ERR Protocol error: query buffer limit reached");
            return write(&mut stream, &mut out, cfg.command_timeout).await;
        }
        let deadline = if decoder.mid_command() || !buf.is_empty() {
            let since = *partial_since.get_or_insert_with(Instant::now);
            Some(since + cfg.command_timeout)
        } else {
            partial_since = None;
            cfg.idle_timeout.map(|t| Instant::now() + t)
        };
        if *stop.borrow_and_update() {
            return Ok(());
        }
        buf.reserve(READ_CHUNK);
        let read = async {
            match deadline {
                Some(d) => timeout_at(d, stream.read_buf(&mut buf))
                    .await
                    .unwrap_or(Ok(0)),
                None => stream.read_buf(&mut buf).await,
            }
        };
        tokio::select! {
            n = read => {
                if n? == 0 {
                    return Ok(());
                }
            }
            _ = stop.changed() => return Ok(()),
        }
    }
}

/// Writes and clears `out`, within `limit` (a client that stops reading is dropped).
async fn write(stream: &mut TcpStream, out: &mut Vec<u8>, limit: Duration) -> io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let result = tokio::time::timeout(limit, stream.write_all(out)).await;
    out.clear();
    result.map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "client not reading"))?
}
