//! Every rank of a cluster in one process: the transport of tests and simulations.
//!
//! ```
//! use std::time::Duration;
//! use strads_ap_runtime::transport::{deadline_in, mem::MemCluster, Transport};
//!
//! let ranks = MemCluster::new(3).into_transports();
//! ranks[2].send(0, 7, b"hello".to_vec()).unwrap();
//! let got = ranks[0].recv(2, 7, deadline_in(Duration::from_secs(1))).unwrap();
//! assert_eq!(got, b"hello");
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{deadline_in, tags, Mailbox, Rank, Transport};
use crate::error::{Error, Result};

/// The shared state of an in-process cluster.
pub struct MemCluster {
    boxes: Vec<Arc<Mailbox>>,
    alive: Vec<Arc<AtomicBool>>,
}

impl MemCluster {
    /// A cluster of `world` ranks.
    pub fn new(world: usize) -> Self {
        assert!(world > 0, "a cluster has at least one rank");
        MemCluster {
            boxes: (0..world).map(|_| Arc::new(Mailbox::new(world))).collect(),
            alive: (0..world)
                .map(|_| Arc::new(AtomicBool::new(true)))
                .collect(),
        }
    }

    /// One transport per rank, in rank order.
    pub fn into_transports(self) -> Vec<Arc<MemTransport>> {
        let boxes = Arc::new(self.boxes);
        let alive = Arc::new(self.alive);
        for (rank, mailbox) in boxes.iter().enumerate() {
            let all = Arc::downgrade(&boxes);
            mailbox.set_replier(
                rank,
                Box::new(move |to, tag, bytes| {
                    if let Some(target) = all.upgrade().as_ref().and_then(|b| b.get(to)) {
                        target.deliver(rank, tag, bytes);
                    }
                }),
            );
        }
        (0..boxes.len())
            .map(|rank| {
                Arc::new(MemTransport {
                    rank,
                    boxes: boxes.clone(),
                    alive: alive.clone(),
                })
            })
            .collect()
    }
}

/// One rank's end of a [`MemCluster`].
pub struct MemTransport {
    rank: Rank,
    boxes: Arc<Vec<Arc<Mailbox>>>,
    alive: Arc<Vec<Arc<AtomicBool>>>,
}

impl MemTransport {
    /// Simulates the death of this rank: every other rank's waits fail with
    /// [`Error::PeerLost`] naming it, and its own sends fail.
    pub fn kill(&self, reason: &str) {
        self.alive[self.rank].store(false, Ordering::SeqCst);
        for (r, b) in self.boxes.iter().enumerate() {
            if r != self.rank {
                b.lose(self.rank, reason);
            }
        }
    }

    /// Leaves the job as a rank whose program returned does: says goodbye to every rank
    /// (their later waits for a message from it fail with [`Error::PeerLeft`]) without
    /// waiting for theirs. Nothing after a [`Transport::shutdown`] or a [`kill`].
    ///
    /// [`kill`]: MemTransport::kill
    pub fn leave(&self) {
        if self.alive[self.rank].swap(false, Ordering::SeqCst) {
            for (r, b) in self.boxes.iter().enumerate() {
                if r != self.rank {
                    b.deliver(self.rank, tags::GOODBYE, Vec::new());
                }
            }
        }
    }

    fn check_alive(&self) -> Result<()> {
        if self.alive[self.rank].load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::Transport(format!(
                "rank {} is shut down or killed",
                self.rank
            )))
        }
    }
}

impl Transport for MemTransport {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.boxes.len()
    }

    fn send_shared(&self, to: Rank, tag: u64, payload: bytes::Bytes) -> Result<()> {
        self.check_alive()?;
        let target = self.boxes.get(to).ok_or_else(|| {
            Error::Transport(format!(
                "send to rank {to}, but the world has {} ranks",
                self.boxes.len()
            ))
        })?;
        target.deliver_chunks(self.rank, tag, vec![payload]);
        Ok(())
    }

    fn recv(&self, from: Rank, tag: u64, deadline: std::time::Instant) -> Result<Vec<u8>> {
        if from >= self.boxes.len() {
            return Err(Error::Transport(format!(
                "receive from rank {from}, but the world has {} ranks",
                self.boxes.len()
            )));
        }
        self.boxes[self.rank].take(from, tag, deadline)
    }

    fn recv_any(&self, tag: u64, deadline: std::time::Instant) -> Result<(Rank, Vec<u8>)> {
        self.boxes[self.rank].take_any(tag, deadline)
    }

    fn shutdown(&self, timeout: Duration) -> Result<()> {
        if !self.alive[self.rank].load(Ordering::SeqCst) {
            return Ok(());
        }
        for (r, b) in self.boxes.iter().enumerate() {
            if r != self.rank {
                b.deliver(self.rank, tags::GOODBYE, Vec::new());
            }
        }
        let others: Vec<Rank> = (0..self.boxes.len()).filter(|&r| r != self.rank).collect();
        let outcome = self.boxes[self.rank].wait_finished(&others, deadline_in(timeout));
        self.alive[self.rank].store(false, Ordering::SeqCst);
        outcome
    }
}
