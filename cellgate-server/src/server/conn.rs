//! A listener that holds at most a fixed number of connections open: past the cap it stops
//! accepting (new clients wait in the kernel's backlog) until one closes.
//!
//! Neither tonic nor axum caps connections, and each open connection holds buffers, so the cap
//! bounds what clients can make the server hold. A connection on which nothing is read or
//! written for the idle timeout is closed, so that silent clients cannot keep every slot (axum
//! has no header-read timeout to do it; the gRPC listener's keepalive pings keep live clients'
//! connections busy).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// A bound listener: TCP, or (gRPC with `GRPC_UDS`) a Unix domain socket.
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    async fn accept(&self) -> io::Result<(IoStream, std::net::SocketAddr)> {
        match self {
            Listener::Tcp(l) => {
                let (stream, addr) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                Ok((IoStream::Tcp(stream), addr))
            }
            // A Unix peer has no IP address: axum and tonic are given the unspecified one.
            Listener::Unix(l) => {
                let (stream, _) = l.accept().await?;
                Ok((IoStream::Unix(stream), ([0, 0, 0, 0], 0).into()))
            }
        }
    }
}

/// An accepted connection's socket.
enum IoStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Calls `$f` on the socket inside `$s` (a `Pin<&mut IoStream>`), whichever kind it is.
macro_rules! on_stream {
    ($s:expr, $f:ident ( $($arg:expr),* )) => {
        match $s.get_mut() {
            IoStream::Tcp(t) => Pin::new(t).$f($($arg),*),
            IoStream::Unix(u) => Pin::new(u).$f($($arg),*),
        }
    };
}

impl AsyncRead for IoStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        on_stream!(self, poll_read(cx, buf))
    }
}

impl AsyncWrite for IoStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        on_stream!(self, poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        on_stream!(self, poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            IoStream::Tcp(t) => t.is_write_vectored(),
            IoStream::Unix(u) => u.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_stream!(self, poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_stream!(self, poll_shutdown(cx))
    }
}

/// An accepted connection; its slot is freed when it is dropped.
pub(crate) struct Conn {
    stream: IoStream,
    _permit: OwnedSemaphorePermit,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
}

impl Conn {
    /// Pushes the idle deadline back: the connection did something.
    fn touch(&mut self) {
        let at = Instant::now() + self.idle;
        self.timer.as_mut().reset(at);
    }

    /// Whether the connection has been idle past the timeout (registers `cx` for the wake-up).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.timer.as_mut().poll(cx).is_ready()
    }
}

fn idle_error() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "connection idle past the timeout")
}

/// A listener with a connection cap.
pub(crate) struct CappedListener {
    listener: Listener,
    slots: Arc<Semaphore>,
    idle: Duration,
}

impl CappedListener {
    /// `listener`, holding at most `max` connections (at least one), each closed after `idle`
    /// without traffic.
    pub(crate) fn new(listener: Listener, max: usize, idle: Duration) -> Self {
        CappedListener {
            listener,
            slots: Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS))),
            idle,
        }
    }

    /// The next connection, once a slot is free. Accept errors (out of file descriptors, a
    /// connection reset before it was accepted) are logged and retried after a pause, so that
    /// the listener outlives them.
    pub(crate) async fn next(&self) -> (Conn, std::net::SocketAddr) {
        // The semaphore is never closed, so acquiring only waits.
        let permit = loop {
            if let Ok(p) = Arc::clone(&self.slots).acquire_owned().await {
                break p;
            }
        };
        loop {
            match self.listener.accept().await {
                Ok((stream, addr)) => {
                    return (
                        Conn {
                            stream,
                            _permit: permit,
                            idle: self.idle,
                            timer: Box::pin(tokio::time::sleep(self.idle)),
                        },
                        addr,
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// The accepted connections as a stream (for tonic).
    pub(crate) fn into_stream(self) -> impl Stream<Item = io::Result<Conn>> {
        futures_util::stream::unfold(self, |l| async move {
            let (c, _) = l.next().await;
            Some((Ok(c), l))
        })
    }
}

impl axum::serve::Listener for CappedListener {
    type Io = Conn;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Conn, std::net::SocketAddr) {
        self.next().await
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        match &self.listener {
            Listener::Tcp(l) => l.local_addr(),
            Listener::Unix(_) => Err(io::Error::other("a Unix socket has no IP address")),
        }
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        match &self.stream {
            IoStream::Tcp(t) => t.connect_info(),
            IoStream::Unix(_) => tonic::transport::server::TcpConnectInfo {
                local_addr: None,
                remote_addr: None,
            },
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.touch();
                Poll::Ready(r)
            }
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(idle_error())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write(cx, buf);
        if r.is_ready() {
            this.touch();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if r.is_ready() {
            this.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        AsyncWrite::is_write_vectored(&self.stream)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
