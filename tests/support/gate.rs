//! A TCP gate between one replica and Redis: it forwards bytes both ways until told to freeze,
//! then holds every connection open and silent (a network partition, a half-open connection,
//! a proxy that hangs), never closing anything. It can freeze every connection through it, only
//! the ones that subscribed (a subscription that dies silently while commands still work), or
//! only Redis's answers (commands still arrive and run: an asymmetric partition).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

#[derive(Default)]
struct Switches {
    all: AtomicBool,
    subscribers: AtomicBool,
    replies: AtomicBool,
}

pub struct Gate {
    pub port: u16,
    switches: Arc<Switches>,
    task: AbortHandle,
}

impl Gate {
    /// A gate on a free loopback port in front of Redis on `redis_port`.
    pub async fn open(redis_port: u16) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("gate binds");
        let port = listener.local_addr().expect("gate address").port();
        let switches = Arc::new(Switches::default());
        let accepting = switches.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", redis_port)).await else {
                    continue;
                };
                tokio::spawn(carry(client, server, accepting.clone()));
            }
        })
        .abort_handle();
        Gate {
            port,
            switches,
            task,
        }
    }

    /// The URL a replica uses to reach Redis through the gate.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Every connection through the gate goes silent, new ones included.
    pub fn freeze(&self) {
        self.switches.all.store(true, Ordering::SeqCst);
    }

    /// Only the connections that sent SUBSCRIBE go silent.
    pub fn freeze_subscribers(&self) {
        self.switches.subscribers.store(true, Ordering::SeqCst);
    }

    /// Redis's answers stop; the replica's commands still reach Redis.
    pub fn freeze_replies(&self) {
        self.switches.replies.store(true, Ordering::SeqCst);
    }

    /// From frozen: the replica's commands move again, those held while frozen first (a link
    /// that delivers what it held, late); Redis's answers stay silent.
    pub fn let_commands_through(&self) {
        self.switches.replies.store(true, Ordering::SeqCst);
        self.switches.all.store(false, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.switches.replies.store(false, Ordering::SeqCst);
        self.switches.all.store(false, Ordering::SeqCst);
        self.switches.subscribers.store(false, Ordering::SeqCst);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Forwards both ways; while frozen, reads nothing more and writes nothing (the peers' bytes
/// wait in the kernel, as on a link that dropped every packet).
async fn carry(client: TcpStream, server: TcpStream, switches: Arc<Switches>) {
    let subscriber = Arc::new(AtomicBool::new(false));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(
        client_read,
        server_write,
        switches.clone(),
        subscriber.clone(),
        true,
    );
    let down = pump(server_read, client_write, switches, subscriber, false);
    tokio::join!(up, down);
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    switches: Arc<Switches>,
    subscriber: Arc<AtomicBool>,
    from_client: bool,
) {
    let frozen = |subscriber: &AtomicBool| {
        switches.all.load(Ordering::SeqCst)
            || (switches.subscribers.load(Ordering::SeqCst) && subscriber.load(Ordering::SeqCst))
            || (switches.replies.load(Ordering::SeqCst) && !from_client)
    };
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        while frozen(&subscriber) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if from_client
            && buffer[..n]
                .windows(9)
                .any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"))
        {
            subscriber.store(true, Ordering::SeqCst);
        }
        // Bytes read just as the gate froze are held, not delivered.
        while frozen(&subscriber) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
