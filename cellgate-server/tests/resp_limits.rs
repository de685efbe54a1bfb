//! The configurable limits of `resp::serve`, on a real listener on 127.0.0.1 run in-process
//! (so that each test can set its own [`RespConfig`]): too many connections, a command that
//! never completes, a query buffer over its bound, an idle connection, and shutdown.

use std::time::Duration;

use cellgate_server::resp::{serve, RespConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// Starts `serve` with `config`; the sender stops it, the handle ends with `serve`.
async fn start(
    config: RespConfig,
) -> (
    std::net::SocketAddr,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(serve(listener, config, async {
        let _ = rx.await;
    }));
    (addr, tx, handle)
}

/// Reads until the peer closes (or 10 s pass, which fails the caller's assertion).
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    out
}

async fn ping(addr: std::net::SocketAddr) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"PING\r\n").await.unwrap();
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"+PONG\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_connections_get_redis_error_and_close() {
    let config = RespConfig {
        max_connections: 2,
        ..RespConfig::default()
    };
    let (addr, stop, handle) = start(config).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // A round trip proves the connection was admitted before the next one is made.
        s.write_all(b"PING\r\n").await.unwrap();
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).await.unwrap();
        held.push(s);
    }
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert_eq!(
        read_to_close(&mut third).await,
        b"-ERR max number of clients reached\r\n"
    );
    drop(held);
    // Slots come back once the held connections end.
    let mut served = false;
    for _ in 0..100 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"PING\r\n").await.unwrap();
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_buf(&mut buf)).await;
        if buf == b"+PONG\r\n" {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served);
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_never_completes_is_dropped_after_the_timeout() {
    let config = RespConfig {
        command_timeout: Duration::from_millis(200),
        ..RespConfig::default()
    };
    let (addr, stop, handle) = start(config).await;
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(b"*2\r\n$4\r\nECHO\r\n$5\r\nhe")
        .await
        .unwrap();
    ping(addr).await;
    assert_eq!(read_to_close(&mut stalled).await, b"");
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_buffer_bound_closes_the_connection() {
    let config = RespConfig {
        max_query_bytes: 4096,
        max_bulk_len: 1024 * 1024,
        ..RespConfig::default()
    };
    let (addr, stop, handle) = start(config).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // A bulk string within max_bulk_len, but more than the connection may buffer.
    s.write_all(b"*2\r\n$4\r\nECHO\r\n$100000\r\n")
        .await
        .unwrap();
    let _ = s.write_all(&[b'x'; 8192]).await;
    assert_eq!(
        read_to_close(&mut s).await,
        b"-ERR Protocol error: query buffer limit reached\r\n"
    );
    ping(addr).await;
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_when_an_idle_timeout_is_set() {
    let config = RespConfig {
        idle_timeout: Some(Duration::from_millis(100)),
        ..RespConfig::default()
    };
    let (addr, stop, handle) = start(config).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"PING\r\n").await.unwrap();
    assert_eq!(read_to_close(&mut s).await, b"+PONG\r\n");
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_what_arrived_and_closes_every_connection() {
    let (addr, stop, handle) = start(RespConfig::default()).await;
    let mut a = TcpStream::connect(addr).await.unwrap();
    a.write_all(b"PING\r\n").await.unwrap();
    let mut buf = [0u8; 7];
    a.read_exact(&mut buf).await.unwrap();
    stop.send(()).unwrap();
    assert_eq!(read_to_close(&mut a).await, b"");
    handle.await.unwrap().unwrap();
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn invalid_configs_are_refused() {
    for config in [
        RespConfig {
            max_connections: 0,
            ..RespConfig::default()
        },
        RespConfig {
            max_keys: 0,
            ..RespConfig::default()
        },
    ] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let err = serve(listener, config, async {}).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    }
}
