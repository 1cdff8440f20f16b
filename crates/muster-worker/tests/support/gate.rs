//! A TCP gate in front of a server: while closed it answers every request `503 E_UNAVAILABLE`
//! with `Retry-After: 1` (and closes the connection), recording when each request came; while
//! open it passes connections through.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Gate {
    pub addr: SocketAddr,
    open: watch::Sender<bool>,
    refused: Arc<Mutex<Vec<Instant>>>,
}

const BUSY_BODY: &str = r#"{"error":{"code":"E_UNAVAILABLE","message":"gate closed"}}"#;

fn busy() -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{BUSY_BODY}",
        BUSY_BODY.len()
    )
    .into_bytes()
}

impl Gate {
    /// A closed gate in front of `upstream`.
    pub async fn closed(upstream: SocketAddr) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = watch::Sender::new(false);
        let refused: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let (is_open, log) = (open.subscribe(), refused.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (mut is_open, log) = (is_open.clone(), log.clone());
                tokio::spawn(async move {
                    if *is_open.borrow_and_update() {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            tokio::select! {
                                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                                _ = is_open.wait_for(|open| !*open) => {}
                            }
                        }
                        return;
                    }
                    if read_request(&mut client).await {
                        log.lock().unwrap().push(Instant::now());
                        let _ = client.write_all(&busy()).await;
                        let _ = client.shutdown().await;
                    }
                });
            }
        });
        Gate {
            addr,
            open,
            refused,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// Closes the gate for new connections (and for every request of a connection opened
    /// before: those are cut).
    pub fn close(&self) {
        self.open.send_replace(false);
    }

    /// When each refused request arrived.
    pub fn refused(&self) -> Vec<Instant> {
        self.refused.lock().unwrap().clone()
    }
}

/// Reads one request (head and `content-length` body); false when the client went away.
async fn read_request(client: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return true;
            }
        }
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
