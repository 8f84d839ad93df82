//! A flood of clients without the job's secret: they complete TLS, never prove the secret,
//! and try to make a rank buffer data (one-way streams, the handshake stream). The ranks
//! run on threads of this process; the flood comes from a second process (this test
//! binary run again as `flooder`), so that this process's memory is the ranks' alone.
//! Every wait is bounded.

use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use strads_ap_runtime::cluster::collective::Comm;
use strads_ap_runtime::transport::quic::testing;
use strads_ap_runtime::transport::{QuicOptions, QuicTransport, Transport};

const SECRET: &[u8] = b"a test secret of some length";
/// Where the flooder aims, set only in the flooder's environment.
const TARGET: &str = "STRADS_TEST_FLOOD_TARGET";
/// Connections the flooder opens, and bytes it tries to push through each.
const CONNECTIONS: usize = 200;
const BYTES_PER_CONNECTION: usize = 2 << 20;
/// The bar: what the flood may add to the ranks' memory.
const MAX_GROWTH: u64 = 64 << 20;

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kib << 10
}

/// Not a test on its own: the flooder process of the test below, which runs it (ignored
/// otherwise; it needs [`TARGET`]).
#[test]
#[ignore = "the flood test's second process"]
fn flooder() {
    let target = std::env::var(TARGET).expect("run by the flood test, which sets the target");
    let target: SocketAddr = target.parse().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let endpoint = testing::raw_client().unwrap();
        let mut tasks = Vec::new();
        for _ in 0..CONNECTIONS {
            let endpoint = endpoint.clone();
            tasks.push(tokio::spawn(async move {
                let budget = Duration::from_secs(4);
                let _ = tokio::time::timeout(budget, async {
                    let Ok(connecting) = endpoint.connect(target, "strads-ap") else {
                        return;
                    };
                    let Ok(conn) = connecting.await else {
                        return;
                    };
                    let chunk = vec![0x5au8; 64 << 10];
                    // One-way streams, as ranks send data once authenticated.
                    let uni = async {
                        if let Ok(mut s) = conn.open_uni().await {
                            for _ in 0..BYTES_PER_CONNECTION / chunk.len() {
                                if s.write_all(&chunk).await.is_err() {
                                    break;
                                }
                            }
                        }
                    };
                    // The handshake stream, with a length prefix promising a large hello.
                    let bidi = async {
                        if let Ok((mut s, _r)) = conn.open_bi().await {
                            let _ = s.write_all(&u32::MAX.to_le_bytes()).await;
                            for _ in 0..BYTES_PER_CONNECTION / chunk.len() {
                                if s.write_all(&chunk).await.is_err() {
                                    break;
                                }
                            }
                        }
                    };
                    tokio::join!(uni, bidi);
                    // Hold the connection open, unauthenticated.
                    tokio::time::sleep(budget).await;
                })
                .await;
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}

#[test]
fn a_flood_of_unauthenticated_clients_costs_a_rank_little_and_the_job_goes_on() {
    let addr = {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    let go_rx = std::sync::Arc::new(std::sync::Mutex::new(go_rx));
    for rank in 0..2 {
        let (ready_tx, done_tx, go_rx) = (ready_tx.clone(), done_tx.clone(), go_rx.clone());
        thread::spawn(move || {
            let run = || -> strads_ap_runtime::Result<(u64, usize)> {
                let mut o = QuicOptions::new(rank, 2, "flood-job", SECRET, addr);
                o.startup_timeout = Duration::from_secs(20);
                let t = QuicTransport::start(o)?;
                let comm = Comm::new(t.clone()).with_timeout(Duration::from_secs(60));
                comm.barrier()?;
                let _ = ready_tx.send(());
                // Rank 0 waits for the end of the flood; rank 1 meets it at the barrier.
                if rank == 0 {
                    let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(60));
                }
                comm.barrier()?;
                let sum = comm.allreduce(rank as u64 + 1, |a, b| a + b)?;
                let bulk = comm.broadcast(0, vec![7u8; 8 << 20])?;
                let ok = bulk.iter().filter(|&&b| b == 7).count();
                t.shutdown(Duration::from_secs(20))?;
                Ok((sum, ok))
            };
            let _ = done_tx.send((rank, run()));
        });
    }
    for _ in 0..2 {
        ready_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("both ranks join");
    }
    let before = resident_bytes();
    let mut flooder = Command::new(std::env::current_exe().unwrap())
        .args(["flooder", "--exact", "--ignored", "--test-threads", "1"])
        .env(TARGET, addr.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut peak = before;
    let flooded = loop {
        peak = peak.max(resident_bytes());
        if let Some(status) = flooder.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = flooder.kill();
            let _ = flooder.wait();
            panic!("the flooder did not finish within 60 s");
        }
        thread::sleep(Duration::from_millis(20));
    };
    peak = peak.max(resident_bytes());
    // The flood really ran: the second process ran its one (ignored) test, and it passed.
    let mut report = String::new();
    std::io::Read::read_to_string(&mut flooder.stdout.take().unwrap(), &mut report).unwrap();
    assert!(
        flooded.success() && report.contains("1 passed"),
        "the flooder did not run: {flooded}\n{report}"
    );
    go_tx.send(()).unwrap();
    for _ in 0..2 {
        let (rank, outcome) = done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the ranks finish after the flood");
        let (sum, ok) = outcome.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!((sum, ok), (3, 8 << 20), "rank {rank}");
    }
    let growth = peak.saturating_sub(before);
    eprintln!(
        "flood of {CONNECTIONS} connections: resident {} MiB before, peak {} MiB",
        before >> 20,
        peak >> 20
    );
    assert!(
        growth < MAX_GROWTH,
        "the flood grew the ranks' memory by {} MiB (bar: {} MiB)",
        growth >> 20,
        MAX_GROWTH >> 20
    );
}
