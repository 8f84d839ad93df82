//! The QUIC transport on loopback: ranks on threads of this process, each with its own
//! endpoint and real QUIC connections. Every test bounds its waits.

use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use quinn::VarInt;
use strads_ap_runtime::cluster::collective::Comm;
use strads_ap_runtime::transport::quic::testing;
use strads_ap_runtime::transport::{deadline_in, QuicOptions, QuicTransport, Transport};
use strads_ap_runtime::wire::{self, Handshake, Hello, Role};
use strads_ap_runtime::Error;

const SECRET: &[u8] = b"a test secret of some length";
const LIMIT: Duration = Duration::from_secs(60);

fn free_addr() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap()
}

fn options(rank: usize, world: usize, addr: SocketAddr) -> QuicOptions {
    let mut o = QuicOptions::new(rank, world, "test-job", SECRET, addr);
    o.startup_timeout = Duration::from_secs(20);
    o
}

/// Runs `f` on its own thread and waits for it at most [`LIMIT`].
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

/// A well-behaved rank of a 2-rank job: joins, meets the other at a barrier, leaves.
fn member(rank: usize, addr: SocketAddr) -> mpsc::Receiver<strads_ap_runtime::Result<()>> {
    bounded(move || {
        let t = QuicTransport::start(options(rank, 2, addr))?;
        Comm::new(t.clone()).barrier()?;
        t.shutdown(Duration::from_secs(10))
    })
}

fn wait<T>(rx: mpsc::Receiver<T>, what: &str) -> T {
    rx.recv_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("{what} did not finish within {LIMIT:?}"))
}

#[test]
fn three_ranks_join_and_run_collectives_and_bulk_messages() {
    let addr = free_addr();
    let runs: Vec<_> = (0..3)
        .map(|rank| {
            bounded(move || -> strads_ap_runtime::Result<(f64, bool, usize)> {
                let t = QuicTransport::start(options(rank, 3, addr))?;
                let comm = Comm::new(t.clone()).with_timeout(Duration::from_secs(30));
                comm.barrier()?;
                let sum = comm.allreduce(0.5f64 * rank as f64, |a, b| a + b)?;
                // Many small messages of mixed sizes, in order, from every rank to rank 0.
                let deadline = deadline_in(Duration::from_secs(30));
                for i in 0..300u32 {
                    let len = (i as usize * 37) % 5000;
                    t.send(0, 9, vec![(i % 251) as u8; len])?;
                }
                let mut in_order = true;
                if rank == 0 {
                    for from in 0..3 {
                        for i in 0..300u32 {
                            let m = t.recv(from, 9, deadline)?;
                            in_order &= m.len() == (i as usize * 37) % 5000
                                && m.iter().all(|&b| b == (i % 251) as u8);
                        }
                    }
                }
                // One bulk message of 24 MiB from rank 2 to rank 1.
                let mut bulk = 0;
                if rank == 2 {
                    let data: Vec<u8> = (0..24 << 20).map(|i| (i % 253) as u8).collect();
                    t.send(1, 10, data)?;
                } else if rank == 1 {
                    let m = t.recv(2, 10, deadline)?;
                    in_order &= m.iter().enumerate().all(|(i, &b)| b == (i % 253) as u8);
                    bulk = m.len();
                }
                comm.barrier()?;
                t.shutdown(Duration::from_secs(20))?;
                Ok((sum, in_order, bulk))
            })
        })
        .collect();
    for (rank, rx) in runs.into_iter().enumerate() {
        let (sum, in_order, bulk) =
            wait(rx, "a rank").unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(sum, 1.5);
        assert!(in_order, "rank {rank} saw messages out of order or damaged");
        if rank == 1 {
            assert_eq!(bulk, 24 << 20);
        }
    }
}

#[test]
fn a_rank_with_the_wrong_secret_is_refused_and_the_job_goes_on() {
    let addr = free_addr();
    let rank0 = member(0, addr);
    let mut bad = options(1, 2, addr);
    bad.secret = b"not the secret of this job".to_vec();
    let intruder = wait(
        bounded(move || QuicTransport::start(bad).map(|_| ())),
        "the intruder",
    );
    match intruder {
        Err(Error::Transport(msg)) => assert!(msg.contains("not admitted to this job"), "{msg}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let rank1 = member(1, addr);
    wait(rank0, "rank 0").unwrap();
    wait(rank1, "rank 1").unwrap();
}

#[test]
fn a_rank_of_another_job_is_refused() {
    let addr = free_addr();
    let rank0 = member(0, addr);
    let mut other = options(1, 2, addr);
    other.job = "another-job".into();
    match wait(
        bounded(move || QuicTransport::start(other).map(|_| ())),
        "the stranger",
    ) {
        // Refused without learning anything of the job it tried to join.
        Err(Error::Transport(msg)) => {
            assert!(msg.contains("not admitted to this job"), "{msg}");
            assert!(!msg.contains("test-job"), "{msg}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Rank 0 is still waiting for the real rank 1.
    let rank1 = member(1, addr);
    wait(rank0, "rank 0").unwrap();
    wait(rank1, "rank 1").unwrap();
}

#[test]
fn garbage_instead_of_a_hello_is_refused_without_harm() {
    let addr = free_addr();
    let rank0 = member(0, addr);
    // Raw UDP noise at the rendezvous port, then a TLS-speaking client sending garbage.
    let noise = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..50u8 {
        noise.send_to(&[i; 700], addr).unwrap();
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let reason = rt.block_on(async {
        let endpoint = testing::raw_client().unwrap();
        let conn = endpoint.connect(addr, "strads-ap").unwrap().await.unwrap();
        let (mut send, _recv) = conn.open_bi().await.unwrap();
        send.write_all(&[0xff; 64]).await.unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(20), conn.closed())
            .await
            .expect("rank 0 closes the connection");
        closed.to_string()
    });
    // The reason (a handshake message of an impossible length) is in rank 0's log only.
    assert!(reason.contains("not admitted to this job"), "{reason}");
    assert!(!reason.contains("handshake message of"), "{reason}");
    let rank1 = member(1, addr);
    wait(rank0, "rank 0").unwrap();
    wait(rank1, "rank 1").unwrap();
}

#[test]
fn an_oversized_frame_disconnects_the_peer_and_fails_the_job_cleanly() {
    let addr = free_addr();
    let rank0 = bounded(move || {
        let mut o = options(0, 2, addr);
        o.max_frame = 1 << 20;
        let t = QuicTransport::start(o)?;
        // Wait for a message that the broken peer never sends properly.
        t.recv(1, 5, deadline_in(Duration::from_secs(30)))
            .map(|_| ())
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Join as rank 1 by the book, then send a frame header announcing 2 MiB.
        let endpoint = testing::raw_client().unwrap();
        let conn = endpoint.connect(addr, "strads-ap").unwrap().await.unwrap();
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        let mine = Hello::new("test-job", 1, 2);
        testing::send_handshake(&mut send, &Handshake::Hello(mine.clone()))
            .await
            .unwrap();
        let theirs = match testing::recv_handshake(&mut recv).await.unwrap() {
            Handshake::Hello(h) => h,
            other => panic!("expected a hello, got {other:?}"),
        };
        let ex = testing::session_exporter(&conn).unwrap();
        let proof = wire::proof(SECRET, Role::Client, &ex, &mine, &theirs);
        testing::send_handshake(&mut send, &Handshake::Proof(proof))
            .await
            .unwrap();
        assert!(matches!(
            testing::recv_handshake(&mut recv).await.unwrap(),
            Handshake::Proof(_)
        ));
        let mut s = conn.open_uni().await.unwrap();
        let mut bytes = 0u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(&5u64.to_le_bytes());
        bytes.extend_from_slice(&(2u32 << 20).to_le_bytes());
        s.write_all(&bytes).await.unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(20), conn.closed())
            .await
            .expect("rank 0 disconnects the peer");
        assert!(closed.to_string().contains("oversized frame"), "{closed}");
        conn.close(VarInt::from_u32(0), b"");
    });
    match wait(rank0, "rank 0") {
        Err(Error::PeerLost { rank: 1, reason }) => {
            assert!(
                reason.contains("oversized frame: 2097152 bytes (limit 1048576)"),
                "{reason}"
            )
        }
        other => panic!("expected rank 1 lost, got {other:?}"),
    }
}

#[test]
fn a_dropped_rank_is_reported_lost_to_the_others() {
    let addr = free_addr();
    let rank1 = bounded(move || -> strads_ap_runtime::Result<()> {
        let t = QuicTransport::start(options(1, 2, addr))?;
        Comm::new(t.clone()).barrier()?;
        drop(t); // a rank that exits without saying goodbye
        Ok(())
    });
    let rank0 = bounded(move || {
        let t: Arc<QuicTransport> = QuicTransport::start(options(0, 2, addr))?;
        Comm::new(t.clone()).barrier()?;
        t.recv(1, 5, deadline_in(Duration::from_secs(30)))
            .map(|_| ())
    });
    wait(rank1, "rank 1").unwrap();
    match wait(rank0, "rank 0") {
        Err(Error::PeerLost { rank: 1, reason }) => {
            assert!(reason.contains("rank exiting"), "{reason}")
        }
        other => panic!("expected rank 1 lost, got {other:?}"),
    }
}
