//! A listener that holds at most a fixed number of connections open: past the cap it stops
//! accepting (new clients wait in the kernel's backlog) until one closes.
//!
//! Neither tonic nor axum caps connections, and each open connection holds buffers, so the cap
//! bounds what clients can make the server hold.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// An accepted connection; its slot is freed when it is dropped.
pub(crate) struct Conn {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

/// A TCP listener with a connection cap.
pub(crate) struct CappedListener {
    listener: TcpListener,
    slots: Arc<Semaphore>,
}

impl CappedListener {
    /// `listener`, holding at most `max` connections (at least one).
    pub(crate) fn new(listener: TcpListener, max: usize) -> Self {
        CappedListener {
            listener,
            slots: Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS))),
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
                    let _ = stream.set_nodelay(true);
                    return (
                        Conn {
                            stream,
                            _permit: permit,
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
        self.listener.local_addr()
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
