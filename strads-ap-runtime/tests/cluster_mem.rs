//! Collectives and failure handling on an in-process 4-rank cluster.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use strads_ap_runtime::cluster::collective::Comm;
use strads_ap_runtime::transport::mem::{MemCluster, MemTransport};
use strads_ap_runtime::transport::Transport;
use strads_ap_runtime::Error;

/// Runs `f` on every rank of a `world`-rank cluster, each on its own thread.
fn on_cluster<T: Send + 'static>(
    world: usize,
    f: impl Fn(Arc<MemTransport>) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let handles: Vec<_> = MemCluster::new(world)
        .into_transports()
        .into_iter()
        .map(|t| {
            let f = f.clone();
            thread::spawn(move || f(t))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn collectives_agree_on_every_rank() {
    let results = on_cluster(4, |t| {
        let comm = Comm::new(t.clone()).with_timeout(Duration::from_secs(20));
        let r = comm.rank();
        comm.barrier().unwrap();
        let b = comm.broadcast(2, format!("from {r}")).unwrap();
        let g = comm.gather(1, r * 10).unwrap();
        let all = comm.allgather(vec![r; r]).unwrap();
        // Floating point: folded in rank order on rank 0, so identical everywhere.
        let x = 0.1f64 * (r as f64 + 1.0);
        let sum = comm.allreduce(x, |a, b| a + b).unwrap();
        let max = comm.allreduce(r as i64 - 2, i64::max).unwrap();
        t.shutdown(Duration::from_secs(10)).unwrap();
        (r, b, g, all, sum, max)
    });
    let serial_sum = (0..4)
        .map(|r| 0.1f64 * (r as f64 + 1.0))
        .fold(0.0, |a, b| a + b);
    for (r, b, g, all, sum, max) in results {
        assert_eq!(b, "from 2");
        if r == 1 {
            assert_eq!(g, Some(vec![0, 10, 20, 30]));
        } else {
            assert_eq!(g, None);
        }
        assert_eq!(all, vec![vec![], vec![1], vec![2, 2], vec![3, 3, 3]]);
        assert_eq!(sum.to_bits(), serial_sum.to_bits());
        assert_eq!(max, 1);
    }
}

#[test]
fn point_to_point_messages_keep_their_order() {
    let results = on_cluster(3, |t| {
        let me = t.rank();
        for to in 0..3 {
            for i in 0..100u32 {
                t.send(to, 77, i.to_le_bytes().to_vec()).unwrap();
            }
        }
        let deadline = strads_ap_runtime::transport::deadline_in(Duration::from_secs(20));
        let mut ok = true;
        for from in 0..3 {
            for i in 0..100u32 {
                ok &= t.recv(from, 77, deadline).unwrap() == i.to_le_bytes();
            }
        }
        t.shutdown(Duration::from_secs(10)).unwrap();
        (me, ok)
    });
    assert!(results.iter().all(|(_, ok)| *ok));
}

#[test]
fn a_rank_at_another_operator_is_a_divergence_error_on_every_rank() {
    let results = on_cluster(4, |t| {
        let comm = Comm::new(t.clone()).with_timeout(Duration::from_secs(20));
        let site = if comm.rank() == 2 {
            "src/main.rs:40:5"
        } else {
            "src/main.rs:12:9"
        };
        let captures = if comm.rank() == 0 {
            vec![1, 2, 3]
        } else {
            vec![]
        };
        let first = comm.enter_operator("src/main.rs:3:1", "Task3", captures.clone());
        let second = comm.enter_operator(site, "TaskX", captures);
        (first, second)
    });
    for (first, second) in results {
        assert_eq!(
            first.unwrap(),
            vec![1, 2, 3],
            "the driver's captures reach every rank"
        );
        match second {
            Err(Error::Divergence { rank, driver, here }) => {
                assert_eq!(rank, 2);
                assert_eq!(driver, "src/main.rs:12:9");
                assert_eq!(here, "src/main.rs:40:5");
                let msg = Error::Divergence { rank, driver, here }.to_string();
                assert!(msg.contains("rank 0 is at src/main.rs:12:9"), "{msg}");
                assert!(msg.contains("rank 2 is at src/main.rs:40:5"), "{msg}");
            }
            other => panic!("expected a divergence error, got {other:?}"),
        }
    }
}

#[test]
fn a_lost_rank_ends_every_wait_with_its_name() {
    let results = on_cluster(4, |t| {
        let comm = Comm::new(t.clone());
        comm.barrier().unwrap();
        if comm.rank() == 3 {
            t.kill("killed by the test");
            return None;
        }
        // No deadline: only the loss can end this wait.
        Some(comm.allreduce(1u32, |a, b| a + b))
    });
    for r in results.into_iter().flatten() {
        match r {
            Err(Error::PeerLost { rank: 3, reason }) => assert_eq!(reason, "killed by the test"),
            other => panic!("expected rank 3 lost, got {other:?}"),
        }
    }
}

#[test]
fn a_silent_rank_is_a_timeout_not_a_hang() {
    let results = on_cluster(2, |t| {
        let comm = Comm::new(t.clone()).with_timeout(Duration::from_millis(200));
        if comm.rank() == 1 {
            // Never joins the barrier (and is not lost: only the deadline can end the wait).
            return None;
        }
        Some(comm.barrier())
    });
    match &results[0] {
        Some(Err(Error::Timeout { what, .. })) => assert!(what.contains("rank 1"), "{what}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
}
