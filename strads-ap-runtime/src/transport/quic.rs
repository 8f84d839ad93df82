//! The QUIC transport (quinn): one connection per pair of ranks, authenticated by the job's
//! secret.
//!
//! Bootstrap: rank 0 listens at the rendezvous address; every other rank binds its own UDP
//! endpoint, connects to rank 0 (retrying with backoff until the start-up deadline) and
//! proves it holds the secret (see [`crate::wire`]). When all have joined, rank 0 sends each
//! the rank table: the address it saw each rank connect from. Rank `i` then connects to
//! every rank `0 < j < i` and accepts the connections of higher ranks.
//!
//! Data: messages to one peer queue up in a writer task, which packs whatever is queued
//! (up to about 1 MiB) into one batch on a fresh unidirectional stream. Receivers read
//! streams concurrently and put batches back in order by their sequence number. Windows
//! and socket buffers are sized for a data centre, not for the internet defaults; a rank
//! holds at most a few tens of MiB of what it sent and no peer acknowledged (a `send`
//! beyond that waits for the network). Messages arrive as the stream's chunks and are
//! joined into one buffer by the thread that receives them, not by the network thread.
//! MTU discovery searches up to 6,500 bytes (loopback and jumbo-frame paths move bulk
//! data about 1.8x as fast as at Ethernet's 1,472), and connections start with a 1 MiB
//! congestion window.
//!
//! A connection refused (wrong secret, another job, another protocol version, garbage) is
//! logged with its reason and does not disturb the job. A peer of the job that breaks the
//! protocol (an oversized frame, a malformed batch) or goes silent past the idle timeout is
//! disconnected and reported lost: the job fails with [`Error::PeerLost`].

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Connection, Endpoint, RecvStream, SendStream, VarInt};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use tokio::sync::{mpsc, oneshot};

use super::{deadline_in, tags, Mailbox, Rank, Transport};
use crate::error::{Error, Result};
use crate::sync::{Condvar, Mutex, MutexGuard, RwLock};
use crate::wire::{self, Handshake, Hello, Reorder, Role, FRAME_HEADER};

/// Close codes sent with a connection close.
mod codes {
    pub const DONE: u32 = 0;
    pub const REFUSED: u32 = 1;
    pub const PROTOCOL: u32 = 2;
}

/// Environment variables of the cluster contract read by [`QuicOptions::from_env`].
pub mod env {
    /// `host:port` where rank 0 listens.
    pub const RENDEZVOUS: &str = "STRADS_RENDEZVOUS";
    /// The job's secret: 64 hex digits (or any string of at least 16 bytes).
    pub const SECRET: &str = "STRADS_SECRET";
    /// A file holding the secret (read when `STRADS_SECRET` is not set).
    pub const SECRET_FILE: &str = "STRADS_SECRET_FILE";
    /// The job id; ranks of other jobs are refused.
    pub const JOB_ID: &str = "STRADS_JOB_ID";
    /// The IP address this rank listens on (default: the local address that routes to the
    /// rendezvous; `0.0.0.0` listens on every interface, only when asked).
    pub const BIND: &str = "STRADS_BIND";
    /// Seconds to wait for every rank to join (default 60).
    pub const STARTUP_TIMEOUT: &str = "STRADS_STARTUP_TIMEOUT";
    /// Seconds of silence after which a peer is declared lost (default 10).
    pub const IDLE_TIMEOUT: &str = "STRADS_IDLE_TIMEOUT";
    /// Largest message a rank accepts, in bytes (default 256 MiB).
    pub const MAX_FRAME: &str = "STRADS_MAX_FRAME";
}

/// Settings of a QUIC rank.
#[derive(Clone, Debug)]
pub struct QuicOptions {
    /// This rank.
    pub rank: Rank,
    /// Number of ranks.
    pub world: usize,
    /// Job id: ranks of other jobs are refused.
    pub job: String,
    /// The job's secret.
    pub secret: Vec<u8>,
    /// Where rank 0 listens.
    pub rendezvous: SocketAddr,
    /// The address this rank binds (rank 0 binds the rendezvous address).
    pub bind: IpAddr,
    /// How long ranks wait for each other at start-up.
    pub startup_timeout: Duration,
    /// Silence after which a peer is lost.
    pub idle_timeout: Duration,
    /// Largest message accepted.
    pub max_frame: usize,
    /// UDP socket send and receive buffer sizes.
    pub socket_buffer: usize,
}

impl QuicOptions {
    /// Options for `rank` of `world` with sensible defaults.
    pub fn new(rank: Rank, world: usize, job: &str, secret: &[u8], rendezvous: SocketAddr) -> Self {
        QuicOptions {
            rank,
            world,
            job: job.to_string(),
            secret: secret.to_vec(),
            rendezvous,
            bind: default_bind(rendezvous),
            startup_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(10),
            max_frame: wire::DEFAULT_MAX_FRAME,
            socket_buffer: 8 << 20,
        }
    }

    /// Options from the launcher's environment variables (see [`mod@env`]).
    pub fn from_env(rank: Rank, world: usize) -> Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let rendezvous = var(env::RENDEZVOUS).ok_or_else(|| {
            Error::Config(format!(
                "{} is not set: a world of {world} ranks needs rank 0's address (start the \
                 job with `strads-ap run`)",
                env::RENDEZVOUS
            ))
        })?;
        let rendezvous = resolve(&rendezvous)?;
        let secret = match (var(env::SECRET), var(env::SECRET_FILE)) {
            (Some(s), _) => parse_secret(&s, env::SECRET)?,
            (None, Some(path)) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    Error::Config(format!("{}={path}: cannot read it: {e}", env::SECRET_FILE))
                })?;
                parse_secret(text.trim(), &path)?
            }
            (None, None) => {
                return Err(Error::Config(format!(
                    "neither {} nor {} is set: ranks prove they belong to the job with its secret",
                    env::SECRET,
                    env::SECRET_FILE
                )))
            }
        };
        let job = var(env::JOB_ID).unwrap_or_else(|| "strads-ap".to_string());
        let mut o = QuicOptions::new(rank, world, &job, &secret, rendezvous);
        if let Some(b) = var(env::BIND) {
            o.bind = b
                .parse()
                .map_err(|e| Error::Config(format!("{}={b}: not an IP address: {e}", env::BIND)))?;
        }
        let secs = |name: &str, default: Duration| -> Result<Duration> {
            match var(name) {
                None => Ok(default),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| {
                        Error::Config(format!("{name}={v}: expected a positive number of seconds"))
                    }),
            }
        };
        o.startup_timeout = secs(env::STARTUP_TIMEOUT, o.startup_timeout)?;
        o.idle_timeout = secs(env::IDLE_TIMEOUT, o.idle_timeout)?;
        if let Some(v) = var(env::MAX_FRAME) {
            o.max_frame = v
                .parse::<usize>()
                .ok()
                .filter(|&n| (1024..=u32::MAX as usize).contains(&n))
                .ok_or_else(|| {
                    Error::Config(format!(
                        "{}={v}: expected a number of bytes in 1024..=4294967295",
                        env::MAX_FRAME
                    ))
                })?;
        }
        Ok(o)
    }
}

/// The address a rank binds by default: the local address the system would send from to
/// reach the rendezvous (found by "connecting" a UDP socket, which sends nothing), so a
/// rank listens on the one interface its job uses, not on every interface. Loopback for a
/// loopback rendezvous; all interfaces only if no route is known (say so with
/// `STRADS_BIND`).
fn default_bind(rendezvous: SocketAddr) -> IpAddr {
    if rendezvous.ip().is_loopback() {
        return rendezvous.ip();
    }
    let unspecified = match rendezvous {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    std::net::UdpSocket::bind(SocketAddr::new(unspecified, 0))
        .and_then(|socket| {
            socket.connect(rendezvous)?;
            socket.local_addr()
        })
        .map(|local| local.ip())
        .unwrap_or(unspecified)
}

fn resolve(addr: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map_err(|e| Error::Config(format!("{}={addr}: {e}", env::RENDEZVOUS)))?
        .next()
        .ok_or_else(|| Error::Config(format!("{}={addr}: no address", env::RENDEZVOUS)))
}

/// Parses a secret: 64 hex digits, or the raw bytes of a string of at least 16 bytes.
pub fn parse_secret(text: &str, source: &str) -> Result<Vec<u8>> {
    let text = text.trim();
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok((0..32)
            .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex digits"))
            .collect());
    }
    if text.len() < 16 {
        return Err(Error::Config(format!(
            "{source}: the cluster secret is too short ({} bytes; use 64 hex digits)",
            text.len()
        )));
    }
    Ok(text.as_bytes().to_vec())
}

enum Outgoing {
    Msg(u64, Bytes),
    /// Reply once everything queued before has been read by the peer.
    Flush(oneshot::Sender<()>),
}

/// Bytes queued for a peer and not yet taken by QUIC. [`Transport::send`] waits while more
/// than [`QUEUE_BYTES`] are (a message larger than that goes alone): a rank that produces
/// faster than the network carries keeps its memory bounded, and reuses it, instead of
/// queuing without limit. Waiting cannot deadlock: queues drain into the peer's reader
/// task, which runs whatever the peer's program does, and a writer that stops (its
/// connection failed) ends every wait.
#[derive(Default)]
struct Queued {
    state: Mutex<QueueState>,
    changed: Condvar,
}

#[derive(Default)]
struct QueueState {
    bytes: usize,
    /// The writer stopped: nothing queued will drain.
    stopped: bool,
}

/// See [`Queued`]. Together with QUIC's own send buffer ([`SEND_WINDOW`]) this bounds
/// what a rank holds of the messages it sent and no peer acknowledged.
const QUEUE_BYTES: usize = 16 << 20;

/// Unacknowledged bytes QUIC may hold per connection: a data-centre path (25 Gb/s, 1 ms
/// round trip) holds ~3 MiB in flight.
const SEND_WINDOW: u64 = 16 << 20;

impl Queued {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock()
    }

    /// Waits until `n` more bytes fit; fails if the writer to `peer` stopped.
    fn add(&self, n: usize, peer: Rank, mailbox: &Mailbox) -> Result<()> {
        let mut q = self.lock();
        while !q.stopped && q.bytes > 0 && q.bytes + n > QUEUE_BYTES {
            q = self.changed.wait(q);
        }
        if q.stopped {
            return Err(match mailbox.lost() {
                Some((rank, reason)) => Error::PeerLost { rank, reason },
                None => Error::PeerLost {
                    rank: peer,
                    reason: "its connection closed".to_string(),
                },
            });
        }
        q.bytes += n;
        Ok(())
    }

    /// QUIC took `n` bytes.
    fn remove(&self, n: usize) {
        let mut q = self.lock();
        q.bytes = q.bytes.saturating_sub(n);
        drop(q);
        self.changed.notify_all();
    }

    /// The writer stopped: wakes every waiting sender.
    fn stop(&self) {
        self.lock().stopped = true;
        self.changed.notify_all();
    }
}

/// Stops a [`Queued`] when the writer that drains it ends, however it ends.
struct StopOnDrop(Arc<Queued>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The sending side of a connection: the writer task's queue and what it holds.
#[derive(Clone)]
struct Peer {
    tx: mpsc::UnboundedSender<Outgoing>,
    queued: Arc<Queued>,
}

/// One rank's QUIC transport.
pub struct QuicTransport {
    rank: Rank,
    world: usize,
    mailbox: Arc<Mailbox>,
    peers: Arc<RwLock<Vec<Option<Peer>>>>,
    conns: Mutex<Vec<Option<Connection>>>,
    endpoint: Endpoint,
    closed: Arc<AtomicBool>,
    max_frame: usize,
    local: SocketAddr,
    // Last, so that it is dropped after the endpoint and tasks that use it.
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for QuicTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicTransport")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("local", &self.local)
            .finish()
    }
}

/// The accept loop: hands authenticated connections over; refuses the rest.
fn spawn_accept_loop(
    runtime: &tokio::runtime::Runtime,
    endpoint: &Endpoint,
    opts: &Arc<QuicOptions>,
) -> mpsc::UnboundedReceiver<Joined> {
    let (joined_tx, joined_rx) = mpsc::unbounded_channel::<Joined>();
    let endpoint = endpoint.clone();
    let opts = opts.clone();
    let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING));
    let crowded = AtomicBool::new(false);
    runtime.spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            let from = incoming.remote_address();
            // Unauthenticated connections are bounded: the rest are refused unread.
            let Ok(permit) = pending.clone().try_acquire_owned() else {
                incoming.refuse();
                if !crowded.swap(true, Ordering::Relaxed) {
                    refused(
                        opts.rank,
                        from,
                        &format!(
                            "{MAX_PENDING} connections await authentication (the first of \
                             such refusals; the others are not logged)"
                        ),
                    );
                }
                continue;
            };
            let opts = opts.clone();
            let tx = joined_tx.clone();
            tokio::spawn(async move {
                let outcome = accept_peer(incoming, &opts).await;
                drop(permit);
                match outcome {
                    Ok(j) => {
                        let _ = tx.send(j);
                    }
                    Err(reason) => refused(opts.rank, from, &reason),
                }
            });
        }
    });
    joined_rx
}

/// A connection that passed the handshake, with the peer's rank.
struct Joined {
    rank: Rank,
    conn: Connection,
}

impl QuicTransport {
    /// Joins the job: binds, meets the other ranks and returns once connected to all of
    /// them (or fails with a clear error at the start-up deadline).
    pub fn start(opts: QuicOptions) -> Result<Arc<QuicTransport>> {
        if opts.world < 2 || opts.rank >= opts.world {
            return Err(Error::Config(format!(
                "rank {} of a world of {}: the QUIC transport needs 2 or more ranks",
                opts.rank, opts.world
            )));
        }
        // One network thread: the writer, the readers and quinn's drivers wake each other
        // on it without crossing threads, which halves a small message's round trip
        // (`netbench --ping`: 180-210 us with two threads, 96-109 us with one), while bulk
        // transfer keeps its pace (1,750-1,825 MiB/s against 1,600-1,700 with two).
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("strads-net-{}", opts.rank))
            .enable_all()
            .build()
            .map_err(|e| Error::Transport(format!("cannot start the network runtime: {e}")))?;
        let deadline = deadline_in(opts.startup_timeout);
        let bind = if opts.rank == 0 {
            opts.rendezvous
        } else {
            SocketAddr::new(opts.bind, 0)
        };
        let endpoint = {
            let _guard = runtime.enter();
            make_endpoint(bind, &opts)?
        };
        let local = endpoint
            .local_addr()
            .map_err(|e| Error::Transport(format!("local address: {e}")))?;
        let opts = Arc::new(opts);
        let mailbox = Arc::new(Mailbox::new(opts.world));
        let closed = Arc::new(AtomicBool::new(false));

        let mut joined_rx = spawn_accept_loop(&runtime, &endpoint, &opts);

        let t = QuicTransport {
            rank: opts.rank,
            world: opts.world,
            mailbox,
            peers: Arc::new(RwLock::new(vec![None; opts.world])),
            conns: Mutex::new(vec![None; opts.world]),
            endpoint,
            closed,
            max_frame: opts.max_frame,
            local,
            runtime,
        };
        // Deadlock probes go straight onto a peer's queue, from the
        // thread that delivered the query; like goodbyes, they are not counted against
        // the send budget (a few bytes) and never wait.
        let peers = Arc::downgrade(&t.peers);
        t.mailbox.set_replier(
            t.rank,
            Box::new(move |to, tag, bytes| {
                if let Some(peers) = peers.upgrade() {
                    if let Some(Some(peer)) = peers.read().get(to) {
                        let _ = peer.tx.send(Outgoing::Msg(tag, bytes.into()));
                    }
                }
            }),
        );
        t.meet_ranks(&mut joined_rx, &opts, deadline)?;
        // Later connections (intruders, duplicates) are refused by the accept loop's
        // handshake or here.
        let rank = t.rank;
        t.runtime.spawn(async move {
            while let Some(j) = joined_rx.recv().await {
                let reason = format!("rank {} is already connected", j.rank);
                j.conn
                    .close(VarInt::from_u32(codes::REFUSED), reason.as_bytes());
                refused(rank, j.conn.remote_address(), &reason);
            }
        });
        Ok(Arc::new(t))
    }

    /// Rank 0 waits for every rank and sends them the rank table (the addresses it saw
    /// them connect from); the others join rank 0, connect to the ranks below them and
    /// wait for those above.
    fn meet_ranks(
        &self,
        joined_rx: &mut mpsc::UnboundedReceiver<Joined>,
        opts: &QuicOptions,
        deadline: Instant,
    ) -> Result<()> {
        let t = self;
        if t.rank == 0 {
            let others: Vec<Rank> = (1..t.world).collect();
            t.wait_joined(joined_rx, &others, opts, deadline)?;
            let table: Vec<SocketAddr> = {
                let conns = t.conns.lock();
                (0..t.world)
                    .map(|r| conns[r].as_ref().map_or(t.local, |c| c.remote_address()))
                    .collect()
            };
            let bytes = Bytes::from(
                postcard::to_stdvec(&table)
                    .map_err(|e| Error::Transport(format!("rank table: {e}")))?,
            );
            for r in 1..t.world {
                t.send_shared(r, tags::RANK_TABLE, bytes.clone())?;
            }
        } else {
            let conn = connect_with_retry(t, opts, opts.rendezvous, 0, deadline)?;
            t.attach(0, conn);
            let bytes = t.mailbox.take(0, tags::RANK_TABLE, deadline)?;
            let table: Vec<SocketAddr> = postcard::from_bytes(&bytes)
                .ok()
                .filter(|v: &Vec<SocketAddr>| v.len() == t.world)
                .ok_or_else(|| Error::PeerLost {
                    rank: 0,
                    reason: "sent a malformed rank table".into(),
                })?;
            for (j, &addr) in table.iter().enumerate().take(t.rank).skip(1) {
                let conn = connect_with_retry(t, opts, addr, j, deadline)?;
                t.attach(j, conn);
            }
            let higher: Vec<Rank> = (t.rank + 1..t.world).collect();
            t.wait_joined(joined_rx, &higher, opts, deadline)?;
        }
        Ok(())
    }

    /// Waits until the ranks `want` have connected (and passed the handshake); refuses a
    /// rank that connects twice.
    fn wait_joined(
        &self,
        rx: &mut mpsc::UnboundedReceiver<Joined>,
        want: &[Rank],
        opts: &QuicOptions,
        deadline: Instant,
    ) -> Result<()> {
        let t = self;
        let mut missing: Vec<Rank> = want.to_vec();
        while !missing.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let got = t
                .runtime
                .block_on(async { tokio::time::timeout(left, rx.recv()).await });
            match got {
                Ok(Some(j)) => {
                    if let Some(pos) = missing.iter().position(|&r| r == j.rank) {
                        missing.remove(pos);
                        t.attach(j.rank, j.conn);
                    } else {
                        let reason = format!("rank {} is already connected", j.rank);
                        j.conn
                            .close(VarInt::from_u32(codes::REFUSED), reason.as_bytes());
                        refused(t.rank, j.conn.remote_address(), &reason);
                    }
                }
                Ok(None) => return Err(Error::Transport("the accept loop stopped".into())),
                Err(_) => {
                    return Err(Error::Timeout {
                        what: format!(
                            "rank(s) {missing:?} to connect to rank {} at {}",
                            t.rank, t.local
                        ),
                        secs: opts.startup_timeout.as_secs_f64(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Starts a transport from the launcher's environment (see [`mod@env`]).
    pub fn from_env(rank: Rank, world: usize) -> Result<Arc<QuicTransport>> {
        Self::start(QuicOptions::from_env(rank, world)?)
    }

    /// The address this rank's endpoint is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Starts the writer and reader of an authenticated connection to `peer`.
    fn attach(&self, peer: Rank, conn: Connection) {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(Queued::default());
        self.peers.write()[peer] = Some(Peer {
            tx,
            queued: queued.clone(),
        });
        self.conns.lock()[peer] = Some(conn.clone());
        let mailbox = self.mailbox.clone();
        self.runtime.spawn(writer(
            conn.clone(),
            rx,
            queued,
            peer,
            mailbox.clone(),
            self.closed.clone(),
        ));
        self.runtime.spawn(reader(
            conn,
            peer,
            mailbox,
            self.closed.clone(),
            self.max_frame,
        ));
    }
}

fn refused(rank: Rank, from: SocketAddr, reason: &str) {
    tracing::warn!("rank {rank} refused a connection from {from}: {reason}");
    eprintln!("strads-ap: rank {rank} refused a connection from {from}: {reason}");
}

impl Transport for QuicTransport {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn send_shared(&self, to: Rank, tag: u64, payload: Bytes) -> Result<()> {
        if to >= self.world {
            return Err(Error::Transport(format!(
                "send to rank {to}, but the world has {} ranks",
                self.world
            )));
        }
        if payload.len() > self.max_frame {
            return Err(Error::Transport(format!(
                "a message of {} bytes is larger than the frame limit ({} bytes; raise {})",
                payload.len(),
                self.max_frame,
                env::MAX_FRAME
            )));
        }
        if to == self.rank {
            self.mailbox.deliver_chunks(to, tag, vec![payload]);
            return Ok(());
        }
        if let Some((rank, reason)) = self.mailbox.lost() {
            return Err(Error::PeerLost { rank, reason });
        }
        let peer = self.peers.read()[to].clone().ok_or_else(|| {
            Error::Transport(format!("rank {to} is not connected to rank {}", self.rank))
        })?;
        peer.queued.add(payload.len(), to, &self.mailbox)?;
        peer.tx
            .send(Outgoing::Msg(tag, payload))
            .map_err(|_| Error::PeerLost {
                rank: to,
                reason: self
                    .mailbox
                    .lost()
                    .map_or_else(|| "its connection closed".to_string(), |l| l.1),
            })
    }

    fn recv(&self, from: Rank, tag: u64, deadline: Instant) -> Result<Vec<u8>> {
        if from >= self.world {
            return Err(Error::Transport(format!(
                "receive from rank {from}, but the world has {} ranks",
                self.world
            )));
        }
        self.mailbox.take(from, tag, deadline)
    }

    fn recv_any(&self, tag: u64, deadline: Instant) -> Result<(Rank, Vec<u8>)> {
        self.mailbox.take_any(tag, deadline)
    }

    fn shutdown(&self, timeout: Duration) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let deadline = deadline_in(timeout);
        let others: Vec<Rank> = (0..self.world).filter(|&r| r != self.rank).collect();
        let mut flushed = Vec::new();
        {
            let peers = self.peers.read();
            for &r in &others {
                if let Some(peer) = &peers[r] {
                    let _ = peer.tx.send(Outgoing::Msg(tags::GOODBYE, Bytes::new()));
                    let (done, wait) = oneshot::channel();
                    let _ = peer.tx.send(Outgoing::Flush(done));
                    flushed.push(wait);
                }
            }
        }
        // Everything sent has been read by its receiver, and every peer is done sending.
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = self.runtime.block_on(async {
            tokio::time::timeout(left, async {
                for w in flushed {
                    let _ = w.await;
                }
            })
            .await
        });
        let outcome = self.mailbox.wait_finished(&others, deadline);
        self.endpoint
            .close(VarInt::from_u32(codes::DONE), b"job finished");
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = self
            .runtime
            .block_on(async { tokio::time::timeout(left, self.endpoint.wait_idle()).await });
        outcome
    }
}

impl Drop for QuicTransport {
    fn drop(&mut self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Without a shutdown: tell the peers at once (they fail fast instead of waiting
        // for the idle timeout), giving the close a moment to leave.
        self.endpoint
            .close(VarInt::from_u32(codes::DONE), b"rank exiting");
        if tokio::runtime::Handle::try_current().is_err() {
            let _ = self.runtime.block_on(async {
                tokio::time::timeout(Duration::from_millis(250), self.endpoint.wait_idle()).await
            });
        }
    }
}

/// Batches queued messages onto fresh streams, in order.
async fn writer(
    conn: Connection,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    queued: Arc<Queued>,
    peer: Rank,
    mailbox: Arc<Mailbox>,
    closed: Arc<AtomicBool>,
) {
    const BATCH_BYTES: usize = 1 << 20;
    let _stop = StopOnDrop(queued.clone());
    let mut seq = 0u64;
    let mut last: Option<SendStream> = None;
    while let Some(first) = rx.recv().await {
        let mut batch = wire::BatchWriter::new(seq);
        // Payload bytes in this batch (as counted by `Queued`).
        let mut bytes = 0;
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Outgoing::Msg(tag, payload) => {
                    bytes += payload.len();
                    batch.push(tag, payload)
                }
                Outgoing::Flush(done) => flushes.push(done),
            }
            if batch.len() < BATCH_BYTES {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            seq += 1;
            let mut chunks = batch.finish();
            let sent = async {
                let mut s = conn.open_uni().await?;
                s.write_all_chunks(&mut chunks).await?;
                s.finish()?;
                Ok::<SendStream, Box<dyn std::error::Error + Send + Sync>>(s)
            }
            .await;
            // QUIC has the bytes (in its send buffer, bounded by the send window).
            queued.remove(bytes);
            match sent {
                Ok(s) => last = Some(s),
                Err(e) => {
                    if !closed.load(Ordering::SeqCst) {
                        mailbox.lose(peer, format!("sending failed: {e}"));
                    }
                    return;
                }
            }
        }
        if !flushes.is_empty() {
            if let Some(s) = &last {
                let _ = s.stopped().await;
            }
            for done in flushes {
                let _ = done.send(());
            }
        }
    }
}

/// Accepts the peer's streams, reads their batches concurrently and delivers them in order.
async fn reader(
    conn: Connection,
    peer: Rank,
    mailbox: Arc<Mailbox>,
    closed: Arc<AtomicBool>,
    max_frame: usize,
) {
    let order: Arc<Mutex<Reorder<Chunked>>> =
        Arc::new(Mutex::new(Reorder::new(RECEIVE_WINDOW as usize)));
    loop {
        let stream = match conn.accept_uni().await {
            Ok(s) => s,
            Err(e) => {
                if !closed.load(Ordering::SeqCst) {
                    mailbox.lose(peer, describe_close(&e));
                }
                return;
            }
        };
        let (conn, mailbox, order) = (conn.clone(), mailbox.clone(), order.clone());
        tokio::spawn(async move {
            let outcome = match read_batch(stream, max_frame).await {
                Ok((seq, batch)) => {
                    let bytes = batch
                        .iter()
                        .map(|(_, chunks)| 16 + chunks.iter().map(|c| c.len()).sum::<usize>())
                        .sum();
                    let mut order = order.lock();
                    order.push(seq, batch, bytes).map(|ready| {
                        for batch in ready {
                            for (tag, chunks) in batch {
                                mailbox.deliver_chunks(peer, tag, chunks);
                            }
                        }
                    })
                }
                Err(e) => Err(e),
            };
            if let Err(reason) = outcome {
                let reason = format!("protocol error: {reason}");
                tracing::warn!("disconnecting rank {peer}: {reason}");
                eprintln!("strads-ap: disconnecting rank {peer}: {reason}");
                // Record the reason before closing (the close ends the accept loop, whose
                // own, vaguer report must not be the first), and close before a waiter
                // wakes (its rank may shut the endpoint down with a vaguer close).
                mailbox.lose_then(peer, reason.clone(), || {
                    conn.close(VarInt::from_u32(codes::PROTOCOL), reason.as_bytes())
                });
            }
        });
    }
}

/// Messages of one batch as received: (tag, the payload's chunks), in send order.
type Chunked = Vec<(u64, Vec<bytes::Bytes>)>;

async fn read_batch(
    mut s: RecvStream,
    max_frame: usize,
) -> std::result::Result<(u64, Chunked), String> {
    let mut seq = [0u8; 8];
    s.read_exact(&mut seq)
        .await
        .map_err(|e| format!("batch without a sequence number: {e}"))?;
    let mut out = Vec::new();
    loop {
        let mut header = [0u8; FRAME_HEADER];
        match s.read_exact(&mut header).await {
            Ok(()) => {}
            Err(quinn::ReadExactError::FinishedEarly(0)) => break,
            Err(e) => return Err(format!("truncated frame header: {e}")),
        }
        let h = wire::frame_header(header, max_frame)?;
        // Kept as the stream's own chunks (no copy here): the receiving thread joins them.
        let (mut chunks, mut got) = (Vec::new(), 0);
        while got < h.len {
            match s.read_chunk(h.len - got, true).await {
                Ok(Some(chunk)) => {
                    got += chunk.bytes.len();
                    chunks.push(chunk.bytes);
                }
                Ok(None) => return Err(format!("truncated frame: {got} of {} bytes", h.len)),
                Err(e) => return Err(format!("truncated frame of {} bytes: {e}", h.len)),
            }
        }
        out.push((h.tag, chunks));
    }
    Ok((u64::from_le_bytes(seq), out))
}

fn describe_close(e: &quinn::ConnectionError) -> String {
    match e {
        quinn::ConnectionError::TimedOut => "no response within the idle timeout (the process \
             may have died, hung, or the network is partitioned)"
            .to_string(),
        quinn::ConnectionError::ApplicationClosed(c) => format!(
            "it closed the connection: {}",
            String::from_utf8_lossy(&c.reason)
        ),
        quinn::ConnectionError::Reset => "connection reset (the process restarted or died)".into(),
        other => format!("connection lost: {other}"),
    }
}

fn connect_with_retry(
    t: &QuicTransport,
    opts: &QuicOptions,
    addr: SocketAddr,
    expect: Rank,
    deadline: Instant,
) -> Result<Connection> {
    let mut delay = Duration::from_millis(20);
    let mut last_error;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = t.runtime.block_on(async {
            tokio::time::timeout(
                left.min(Duration::from_secs(5)),
                connect_peer(&t.endpoint, addr, opts, expect),
            )
            .await
            .unwrap_or_else(|_| Err(Retry::Again("no answer".into())))
        });
        match attempt {
            Ok(conn) => return Ok(conn),
            Err(Retry::Fatal(reason)) => {
                return Err(Error::Transport(format!(
                    "rank {} could not join rank {expect} at {addr}: {reason}",
                    opts.rank
                )))
            }
            Err(Retry::Again(reason)) => last_error = reason,
        }
        if Instant::now() + delay >= deadline {
            return Err(Error::Timeout {
                what: format!(
                    "rank {} to connect to rank {expect} at {addr} (last error: {last_error})",
                    opts.rank
                ),
                secs: opts.startup_timeout.as_secs_f64(),
            });
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

enum Retry {
    /// Worth another try (the peer may not be up yet).
    Again(String),
    /// The peer refused us: retrying will not help.
    Fatal(String),
}

async fn connect_peer(
    endpoint: &Endpoint,
    addr: SocketAddr,
    opts: &QuicOptions,
    expect: Rank,
) -> std::result::Result<Connection, Retry> {
    let conn = endpoint
        .connect(addr, "strads-ap")
        .map_err(|e| Retry::Fatal(e.to_string()))?
        .await
        .map_err(|e| Retry::Again(e.to_string()))?;
    let (mut send, mut recv) = conn
        .open_bi()
        .await
        .map_err(|e| Retry::Again(e.to_string()))?;
    let mine = Hello::new(&opts.job, opts.rank, opts.world);
    let fatal = |e: String| Retry::Fatal(e);
    write_handshake(&mut send, &Handshake::Hello(mine.clone()))
        .await
        .map_err(fatal)?;
    let theirs = match read_handshake(&mut recv).await.map_err(fatal)? {
        Handshake::Hello(h) => h,
        Handshake::Refused(r) => return Err(Retry::Fatal(format!("refused: {r}"))),
        Handshake::Proof(_) => return Err(Retry::Fatal("a proof before its hello".into())),
    };
    if let Err(reason) = theirs.check(&opts.job, opts.world) {
        conn.close(VarInt::from_u32(codes::REFUSED), reason.as_bytes());
        return Err(Retry::Fatal(reason));
    }
    if theirs.rank as usize != expect {
        let reason = format!("expected rank {expect}, found rank {}", theirs.rank);
        conn.close(VarInt::from_u32(codes::REFUSED), reason.as_bytes());
        return Err(Retry::Fatal(reason));
    }
    let exporter = exporter(&conn).map_err(fatal)?;
    let mac = wire::proof(&opts.secret, Role::Client, &exporter, &mine, &theirs);
    write_handshake(&mut send, &Handshake::Proof(mac))
        .await
        .map_err(fatal)?;
    match read_handshake(&mut recv).await.map_err(fatal)? {
        Handshake::Proof(p)
            if wire::verify(&opts.secret, Role::Server, &exporter, &mine, &theirs, &p) => {}
        Handshake::Refused(r) => return Err(Retry::Fatal(format!("refused: {r}"))),
        _ => {
            let reason = "its proof of the cluster secret is wrong";
            conn.close(VarInt::from_u32(codes::REFUSED), reason.as_bytes());
            return Err(Retry::Fatal(reason.into()));
        }
    }
    let _ = send.finish();
    raise_limits(&conn);
    Ok(conn)
}

async fn accept_peer(
    incoming: quinn::Incoming,
    opts: &QuicOptions,
) -> std::result::Result<Joined, String> {
    let handshake = async {
        let conn = incoming.await.map_err(|e| format!("TLS handshake: {e}"))?;
        let (mut send, mut recv) = conn
            .accept_bi()
            .await
            .map_err(|e| format!("no handshake stream: {e}"))?;
        // The reason goes to this rank's log; the client, not authenticated, learns nothing
        // about the job from a refusal.
        let refuse = |conn: &Connection, reason: String| {
            conn.close(VarInt::from_u32(codes::REFUSED), NOT_ADMITTED.as_bytes());
            reason
        };
        let theirs = match read_handshake(&mut recv).await {
            Ok(Handshake::Hello(h)) => h,
            Ok(_) => return Err(refuse(&conn, "expected a hello".into())),
            Err(e) => return Err(refuse(&conn, e)),
        };
        if let Err(reason) = theirs.check(&opts.job, opts.world) {
            let _ = write_handshake(&mut send, &Handshake::Refused(NOT_ADMITTED.into())).await;
            let _ = send.finish();
            tokio::time::sleep(Duration::from_millis(50)).await;
            return Err(refuse(&conn, reason));
        }
        let mine = Hello::new(&opts.job, opts.rank, opts.world);
        write_handshake(&mut send, &Handshake::Hello(mine.clone())).await?;
        let exporter = exporter(&conn)?;
        let claimed = match read_handshake(&mut recv).await {
            Ok(Handshake::Proof(p)) => p,
            Ok(_) => return Err(refuse(&conn, "expected a proof".into())),
            Err(e) => return Err(refuse(&conn, e)),
        };
        if !wire::verify(
            &opts.secret,
            Role::Client,
            &exporter,
            &theirs,
            &mine,
            &claimed,
        ) {
            let reason = format!(
                "wrong cluster secret (peer claimed to be rank {})",
                theirs.rank
            );
            let _ = write_handshake(&mut send, &Handshake::Refused(NOT_ADMITTED.into())).await;
            let _ = send.finish();
            tokio::time::sleep(Duration::from_millis(50)).await;
            return Err(refuse(&conn, reason));
        }
        raise_limits(&conn);
        let mac = wire::proof(&opts.secret, Role::Server, &exporter, &theirs, &mine);
        write_handshake(&mut send, &Handshake::Proof(mac)).await?;
        let _ = send.finish();
        Ok(Joined {
            rank: theirs.rank as usize,
            conn,
        })
    };
    tokio::time::timeout(Duration::from_secs(10), handshake)
        .await
        .unwrap_or_else(|_| Err("handshake not completed within 10 s".into()))
}

fn exporter(conn: &Connection) -> std::result::Result<[u8; 32], String> {
    let mut out = [0u8; 32];
    conn.export_keying_material(&mut out, wire::EXPORTER_LABEL, b"")
        .map_err(|e| format!("TLS exporter: {e:?}"))?;
    Ok(out)
}

async fn write_handshake(s: &mut SendStream, msg: &Handshake) -> std::result::Result<(), String> {
    s.write_all(&wire::encode_handshake(msg))
        .await
        .map_err(|e| format!("handshake write: {e}"))
}

async fn read_handshake(s: &mut RecvStream) -> std::result::Result<Handshake, String> {
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix)
        .await
        .map_err(|e| format!("handshake read: {e}"))?;
    let len = wire::handshake_len(prefix)?;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)
        .await
        .map_err(|e| format!("handshake read: {e}"))?;
    wire::decode_handshake(&body)
}

fn make_endpoint(bind: SocketAddr, opts: &QuicOptions) -> Result<Endpoint> {
    let err = |what: &str, e: &dyn std::fmt::Display| Error::Transport(format!("{what}: {e}"));
    // rustls 0.23.48 deprecates the ring provider for lacking post-quantum key exchange;
    // the replacement (aws-lc-rs) needs a C toolchain and CMake on every machine that
    // builds a user's program (the trade-off is in `docs/security.md`). Allowed here, not
    // crate-wide, so that a user's first build, which resolves the newest rustls, prints
    // no warning from us.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert = rcgen::generate_simple_self_signed(vec!["strads-ap".to_string()])
        .map_err(|e| err("certificate", &e))?;
    let cert_der = CertificateDer::from(cert.cert.der().to_vec());
    let key = PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der());

    let mut server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| err("TLS", &e))?
        .with_no_client_auth()
        .with_single_cert(vec![cert_der], key.into())
        .map_err(|e| err("TLS certificate", &e))?;
    server_tls.alpn_protocols = vec![wire::ALPN.to_vec()];
    let mut client_tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| err("TLS", &e))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SecretAuthenticated(provider)))
        .with_no_client_auth();
    client_tls.alpn_protocols = vec![wire::ALPN.to_vec()];

    let transport = Arc::new(transport_config(opts)?);
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(
        QuicServerConfig::try_from(server_tls).map_err(|e| err("QUIC TLS", &e))?,
    ));
    server.transport_config(transport.clone());
    let mut client = quinn::ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(client_tls).map_err(|e| err("QUIC TLS", &e))?,
    ));
    client.transport_config(transport);

    let socket = socket2::Socket::new(
        socket2::Domain::for_address(bind),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .map_err(|e| err("UDP socket", &e))?;
    // Best effort: the kernel caps these at net.core.{r,w}mem_max.
    let _ = socket.set_recv_buffer_size(opts.socket_buffer);
    let _ = socket.set_send_buffer_size(opts.socket_buffer);
    socket.bind(&bind.into()).map_err(|e| {
        Error::Transport(if opts.rank == 0 {
            format!("rank 0 cannot listen at the rendezvous address {bind}: {e}")
        } else {
            format!("rank {} cannot bind {bind}: {e}", opts.rank)
        })
    })?;
    let mut endpoint = Endpoint::new(
        endpoint_config()?,
        Some(server),
        socket.into(),
        Arc::new(quinn::TokioRuntime),
    )
    .map_err(|e| err("QUIC endpoint", &e))?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// The largest UDP payload MTU discovery searches for, and the largest the endpoint
/// accepts (quinn's default, 1,472, would cap every path's MTU there, whatever discovery
/// finds). Quinn sends up to 10 datagrams in one segmentation-offload (GSO) batch, which
/// the kernel takes only if it fits 64 KiB: a larger MTU would break batching (sends fail
/// and read as loss). Ethernet paths stop at their own MTU (1,472 bytes, or jumbo frames
/// cut to this); loopback, whose MTU is 64 KiB, reaches it and moves bulk data about 1.8x
/// as fast as at 1,472 bytes.
const MTU_CEILING: u16 = 6_500;

/// The congestion window a connection starts with: a data-centre path, not the internet's
/// ten packets. It matters for closing too: quinn holds a connection close behind the
/// congestion window while other data is pending, and a closed connection no longer
/// counts the peer's acknowledgements. With quinn's 12,000-byte default and 6,500-byte
/// packets, one MTU probe in flight at the start of a connection blocked the close for
/// good, so that the peer saw its idle timeout instead of the reason (3 runs in 10 of
/// `tests/quic.rs::an_oversized_frame_disconnects_the_peer_and_fails_the_job_cleanly`;
/// 0 in 60 with this window).
const INITIAL_WINDOW: u64 = 1 << 20;

/// The endpoint accepts datagrams up to [`MTU_CEILING`].
fn endpoint_config() -> Result<quinn::EndpointConfig> {
    let mut e = quinn::EndpointConfig::default();
    e.max_udp_payload_size(MTU_CEILING)
        .map_err(|e| Error::Config(format!("QUIC endpoint: {e}")))?;
    Ok(e)
}

/// What a connection may make this rank hold before its peer proved the job's secret: the
/// handshake's one bidirectional stream and a small window, so that a client without the
/// secret costs a few KiB, not the data-centre windows of [`raise_limits`].
const PRE_AUTH_WINDOW: u32 = 64 << 10;
/// Connections accepted and not yet authenticated at once; more are refused at once
/// (a job's ranks connect to a rank once each, at start-up).
const MAX_PENDING: usize = 64;
/// Data-centre windows once authenticated: a 10 Gb/s link with 0.5 ms of round trip holds
/// ~600 KiB; leave room for bursts of bulk transfers.
const RECEIVE_WINDOW: u32 = 256 << 20;
const UNI_STREAMS: u32 = 4096;
const BIDI_STREAMS: u32 = 16;

/// What a refused client is told (the reason is in the refusing rank's log).
const NOT_ADMITTED: &str = "not admitted to this job (the reason is in the log of the rank \
                            that refused: another job, protocol version or world size, or the \
                            wrong secret)";

/// Lifts a connection's limits to the data-centre ones once its peer proved the secret.
fn raise_limits(conn: &Connection) {
    conn.set_receive_window(VarInt::from_u32(RECEIVE_WINDOW));
    conn.set_max_concurrent_uni_streams(VarInt::from_u32(UNI_STREAMS));
    conn.set_max_concurrent_bi_streams(VarInt::from_u32(BIDI_STREAMS));
}

fn transport_config(opts: &QuicOptions) -> Result<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    // Streams may be large; what a peer can make this rank buffer is bounded by the
    // connection's window, small until the peer is authenticated (see `raise_limits`).
    t.stream_receive_window(VarInt::from_u32(64 << 20));
    t.receive_window(VarInt::from_u32(PRE_AUTH_WINDOW));
    t.send_window(SEND_WINDOW);
    t.max_concurrent_uni_streams(VarInt::from_u32(0));
    t.max_concurrent_bidi_streams(VarInt::from_u32(1));
    t.initial_rtt(Duration::from_millis(1));
    t.keep_alive_interval(Some(Duration::from_millis(500).min(opts.idle_timeout / 4)));
    t.max_idle_timeout(Some(
        quinn::IdleTimeout::try_from(opts.idle_timeout)
            .map_err(|e| Error::Config(format!("idle timeout: {e}")))?,
    ));
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(MTU_CEILING);
    t.mtu_discovery_config(Some(mtu));
    let mut cubic = quinn::congestion::CubicConfig::default();
    cubic.initial_window(INITIAL_WINDOW);
    t.congestion_controller_factory(Arc::new(cubic));
    // Streams in the order they were opened, each sent to its end before the next, rather
    // than interleaved frame by frame: a peer's batches are delivered in sequence order
    // anyway (`Reorder`), so interleaving only costs framing and scheduling (bulk transfer
    // 1,262 -> 1,527 MiB/s on loopback, medians of 6 alternated netbench runs).
    t.send_fairness(false);
    Ok(t)
}

/// Accepts any server certificate: a rank is authenticated by its proof of the job's secret,
/// bound to this TLS session (see [`crate::wire`]), not by a certificate authority. The
/// handshake signature is still checked, so the session is with the key it presented.
#[derive(Debug)]
struct SecretAuthenticated(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for SecretAuthenticated {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General(
            "strads-ap speaks TLS 1.3 only".into(),
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Hooks for tests of refusals and protocol errors: an endpoint that speaks QUIC and TLS
/// like a rank but leaves the strads-ap handshake to the caller.
#[doc(hidden)]
pub mod testing {
    use super::*;

    /// A client endpoint on 127.0.0.1; call inside a tokio runtime.
    pub fn raw_client() -> Result<Endpoint> {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        make_endpoint(
            any,
            &QuicOptions::new(1, 2, "test", b"0123456789abcdef", any),
        )
    }

    /// Writes one handshake message.
    pub async fn send_handshake(
        s: &mut SendStream,
        msg: &Handshake,
    ) -> std::result::Result<(), String> {
        write_handshake(s, msg).await
    }

    /// Reads one handshake message.
    pub async fn recv_handshake(s: &mut RecvStream) -> std::result::Result<Handshake, String> {
        read_handshake(s).await
    }

    /// The TLS exporter value proofs are bound to.
    pub fn session_exporter(conn: &Connection) -> std::result::Result<[u8; 32], String> {
        exporter(conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_send_queue_waits_for_the_writer_and_fails_when_it_stops() {
        let mailbox = Arc::new(Mailbox::new(2));
        let queued = Arc::new(Queued::default());
        // A message larger than the bound goes alone: nothing else is queued.
        queued.add(QUEUE_BYTES * 2, 1, &mailbox).unwrap();
        let (q, m) = (queued.clone(), mailbox.clone());
        let waiter = std::thread::spawn(move || q.add(1, 1, &m).map(|()| Instant::now()));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "a full queue makes the sender wait");
        // The sender gets through only once the writer has made room, however late the
        // waiting thread was scheduled (a busy machine may start it after the sleep).
        let made_room = Instant::now();
        queued.remove(QUEUE_BYTES * 2);
        let got_through = waiter.join().unwrap().unwrap();
        assert!(
            got_through >= made_room,
            "the sender went on before there was room"
        );
        assert_eq!(queued.lock().bytes, 1);

        // Full again: the writer stopping (its connection failed, the rank lost) ends the
        // wait with the loss's reason, as the writer's drop guard does.
        queued.add(QUEUE_BYTES - 1, 1, &mailbox).unwrap();
        let (q, m) = (queued.clone(), mailbox.clone());
        let waiter = std::thread::spawn(move || q.add(QUEUE_BYTES, 1, &m));
        mailbox.lose(1, "killed");
        drop(StopOnDrop(queued.clone()));
        match waiter.join().unwrap() {
            Err(Error::PeerLost { rank: 1, reason }) => assert_eq!(reason, "killed"),
            other => panic!("expected the lost rank, got {other:?}"),
        }
        // Later sends to the stopped writer fail at once, even small ones.
        match queued.add(1, 1, &Mailbox::new(2)) {
            Err(Error::PeerLost { rank: 1, reason }) => {
                assert_eq!(reason, "its connection closed")
            }
            other => panic!("expected the closed connection, got {other:?}"),
        }
    }
}
