//! Fuzzing of everything this rank decodes from its peers (test builds only).
//!
//! Every decoder of peer data must return an error, never panic, on any input; what it
//! accepts must be safe to use downstream (a decoded access log must plan and cut into
//! steps). Each property feeds one decoder random bytes, or valid encodings mutated the
//! way a broken or hostile peer would (truncated, bits flipped, length fields and counts
//! set huge, bytes inserted), with [`proptest`] on the stable toolchain.
//!
//! In the normal test suite each property runs [`DEFAULT_CASES`] cases (a few seconds in
//! all). Run them long by hand with `STRADS_FUZZ_CASES`:
//!
//! ```text
//! STRADS_FUZZ_CASES=1000000 cargo test -p strads-ap-runtime --release --lib fuzz
//! ```
//!
//! (`fuzz` matches this module and the `fuzz_` properties kept beside private decoders,
//! such as `engine::async_for::distributed`'s entries.)

use std::ops::Range;
use std::time::Duration;

use proptest::prelude::*;

use crate::cluster::collective::Comm;
use crate::plan::{self, DistPlan, PlanConfig, TableInfo, Transfers};
use crate::recon::{Access, AccessLog, LogShape};
use crate::store::{Request, Shard};
use crate::transport::mem::MemCluster;
use crate::transport::{decode_probe, encode_probe, tags, Hop, Mailbox, Probe, Transport};
use crate::wire;

/// Cases per property in the normal test suite.
pub(crate) const DEFAULT_CASES: u32 = 256;

/// The proptest configuration of a fuzz property: `STRADS_FUZZ_CASES` cases (default
/// [`DEFAULT_CASES`]), no shrinking time limit worth waiting for, no persistence files.
pub(crate) fn config() -> ProptestConfig {
    let cases = std::env::var("STRADS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig {
        cases,
        max_shrink_iters: 2048,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// One change a broken or hostile peer could make to a valid message.
#[derive(Clone, Debug)]
pub(crate) enum Mutation {
    /// Cut the message at a position.
    Truncate(usize),
    /// Flip one bit.
    FlipBit(usize, u8),
    /// Overwrite one byte.
    SetByte(usize, u8),
    /// Overwrite 4 bytes with a little-endian `u32` (a length field).
    SetU32(usize, u32),
    /// Overwrite 8 bytes with a little-endian `u64` (a count, a tag, an index).
    SetU64(usize, u64),
    /// Insert a LEB128 varint (postcard lengths, access log counts and keys).
    InsertVarint(usize, u64),
    /// Insert bytes.
    Insert(usize, Vec<u8>),
}

/// Values that break length fields and counts.
fn edgy_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u32::MAX as u64),
        Just(u32::MAX as u64 + 1),
        Just(1 << 55),
        Just(i64::MAX as u64),
        Just(u64::MAX),
        any::<u64>(),
        0u64..300,
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        (any::<usize>(), edgy_u64()).prop_map(|(i, v)| Mutation::SetU32(i, v as u32)),
        (any::<usize>(), edgy_u64()).prop_map(|(i, v)| Mutation::SetU64(i, v)),
        (any::<usize>(), edgy_u64()).prop_map(|(i, v)| Mutation::InsertVarint(i, v)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
    ]
}

/// Up to four mutations.
pub(crate) fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..5)
}

/// Applies `ms` to `bytes`, in order (positions are taken modulo the room there is).
pub(crate) fn mutate(bytes: &mut Vec<u8>, ms: &[Mutation]) {
    for m in ms {
        // A position with `room` bytes from it, if the message is that long.
        let at = |i: usize, room: usize| bytes.len().checked_sub(room).map(|last| i % (last + 1));
        let anywhere = |i: usize| i % (bytes.len() + 1);
        match m {
            Mutation::Truncate(i) => {
                let cut = anywhere(*i);
                bytes.truncate(cut);
            }
            Mutation::FlipBit(i, b) => {
                if let Some(p) = at(*i, 1) {
                    bytes[p] ^= 1 << b;
                }
            }
            Mutation::SetByte(i, v) => {
                if let Some(p) = at(*i, 1) {
                    bytes[p] = *v;
                }
            }
            Mutation::SetU32(i, v) => {
                if let Some(p) = at(*i, 4) {
                    bytes[p..p + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            Mutation::SetU64(i, v) => {
                if let Some(p) = at(*i, 8) {
                    bytes[p..p + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            Mutation::InsertVarint(i, v) => {
                let p = anywhere(*i);
                let mut varint = Vec::new();
                let mut v = *v;
                while v >= 0x80 {
                    varint.push(v as u8 | 0x80);
                    v >>= 7;
                }
                varint.push(v as u8);
                bytes.splice(p..p, varint);
            }
            Mutation::Insert(i, b) => {
                let p = anywhere(*i);
                bytes.splice(p..p, b.iter().copied());
            }
        }
    }
}

/// Random bytes, mostly short.
fn random_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        prop::collection::vec(any::<u8>(), 0..1024),
    ]
}

// ---------------------------------------------------------------------------------------
// The wire: handshake messages, batches of frames, batch sequence numbers.

fn hello() -> impl Strategy<Value = wire::Handshake> {
    prop_oneof![
        ("[a-z0-9-]{0,20}", 0usize..64, 1usize..64).prop_map(|(job, rank, world)| {
            wire::Handshake::Hello(wire::Hello::new(&job, rank, world))
        }),
        any::<[u8; 32]>().prop_map(wire::Handshake::Proof),
        ".{0,40}".prop_map(wire::Handshake::Refused),
    ]
}

/// A valid batch: sequence number and messages.
fn batch() -> impl Strategy<Value = (u64, wire::Messages)> {
    let payload = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..32),
        prop::collection::vec(any::<u8>(), 0..200),
    ];
    (
        any::<u64>(),
        prop::collection::vec((any::<u64>(), payload), 0..6),
    )
}

fn encode_batch(seq: u64, messages: &wire::Messages) -> Vec<u8> {
    let mut w = wire::BatchWriter::new(seq);
    for (tag, payload) in messages {
        w.push(*tag, payload.clone().into());
    }
    w.finish().concat()
}

/// A handshake message as the transport reads it: a length prefix, then that many bytes.
fn read_handshake(bytes: &[u8]) -> Result<wire::Handshake, String> {
    let prefix: [u8; 4] = bytes
        .get(..4)
        .and_then(|p| p.try_into().ok())
        .ok_or("short prefix")?;
    let len = wire::handshake_len(prefix)?;
    let body = bytes.get(4..4 + len).ok_or("short body")?;
    wire::decode_handshake(body)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_wire_handshake_random(bytes in random_bytes()) {
        let _ = read_handshake(&bytes);
        let _ = wire::decode_handshake(&bytes);
    }

    #[test]
    fn fuzz_wire_handshake_mutated(msg in hello(), ms in mutations()) {
        let good = wire::encode_handshake(&msg);
        prop_assert_eq!(read_handshake(&good), Ok(msg.clone()));
        let mut bytes = good;
        mutate(&mut bytes, &ms);
        if let Ok(wire::Handshake::Hello(h)) = read_handshake(&bytes) {
            // What decodes is then checked against the job; that must not panic either.
            let _ = h.check("job", 4);
        }
    }

    #[test]
    fn fuzz_wire_batch_random(bytes in random_bytes(), max_frame in 0usize..4096) {
        if let Ok((_, msgs)) = wire::parse_batch(&bytes, max_frame) {
            prop_assert!(msgs.iter().all(|(_, p)| p.len() <= max_frame));
        }
        if let Some(h) = bytes.get(..wire::FRAME_HEADER) {
            let _ = wire::frame_header(h.try_into().expect("12 bytes"), max_frame);
        }
    }

    #[test]
    fn fuzz_wire_batch_mutated((seq, msgs) in batch(), ms in mutations()) {
        let good = encode_batch(seq, &msgs);
        prop_assert_eq!(wire::parse_batch(&good, 1 << 10), Ok((seq, msgs.clone())));
        let mut bytes = good;
        mutate(&mut bytes, &ms);
        if let Ok((_, got)) = wire::parse_batch(&bytes, 1 << 10) {
            prop_assert!(got.iter().all(|(_, p)| p.len() <= 1 << 10));
        }
    }

    #[test]
    fn fuzz_wire_reorder(seqs in prop::collection::vec(edgy_u64(), 0..64)) {
        let mut r = wire::Reorder::new(1 << 10);
        let mut delivered = 0u64;
        for s in seqs {
            if let Ok(out) = r.push(s, s, (s % 300) as usize) {
                prop_assert!(r.held() <= 1 << 10);
                for got in out {
                    prop_assert_eq!(got, delivered);
                    delivered += 1;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Access logs from other ranks, and the planner fed what they decode to.

/// A loop's tables and its ranks' logs: per table its key space; per rank its share of
/// the loop indices (from `first`) and its tasks' accesses (valid ones).
#[derive(Clone, Debug)]
struct Logs {
    key_spaces: Vec<usize>,
    shares: Vec<Range<usize>>,
    parts: Vec<AccessLog>,
}

fn logs() -> impl Strategy<Value = Logs> {
    (
        prop::collection::vec(1usize..40, 1..5),
        prop::collection::vec(0usize..12, 1..5),
        0usize..1000,
    )
        .prop_flat_map(|(key_spaces, counts, first)| {
            let slots = key_spaces.len();
            let spaces = key_spaces.clone();
            let access = (0..slots, any::<u64>(), any::<bool>())
                .prop_map(move |(s, k, w)| Access::new(s, k % spaces[s] as u64, w));
            let task = prop::collection::vec(access, 0..6);
            let parts: Vec<_> = counts
                .iter()
                .map(|&n| prop::collection::vec(task.clone(), n))
                .collect();
            let mut shares = Vec::new();
            let mut at = first;
            for n in &counts {
                shares.push(at..at + n);
                at += n;
            }
            (Just(key_spaces), Just(shares), parts)
        })
        .prop_map(|(key_spaces, shares, parts)| Logs {
            key_spaces,
            shares,
            parts: parts.into_iter().map(AccessLog::from_tasks).collect(),
        })
}

impl Logs {
    fn encoded(&self) -> Vec<Vec<u8>> {
        self.parts
            .iter()
            .zip(&self.shares)
            .map(|(log, share)| log.to_bytes(share.start))
            .collect()
    }

    fn shape(&self) -> LogShape<'_> {
        LogShape::new(&self.key_spaces, &self.shares)
    }
}

/// What the engine does with a log the ranks' parts decoded to: plan it and cut the plan
/// into steps for every rank. None of it may panic on a log the decoder accepted.
fn plan_everywhere(
    log: AccessLog,
    key_spaces: &[usize],
    world: usize,
    threads: usize,
    first: usize,
) {
    let tables = TableInfo::unrelaxed(key_spaces);
    let config = PlanConfig {
        threads,
        blocks: None,
        seed: 5,
        first_index: first,
    };
    let plan = plan::plan(log, &tables, &config);
    let owners = vec![None; key_spaces.len()];
    for me in 0..world {
        for which in [Transfers::Written, Transfers::ReadOnly] {
            DistPlan::new(&plan, key_spaces, &owners, world, me, which);
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_log_round_trip(logs in logs()) {
        let joined = AccessLog::from_byte_parts(&logs.encoded(), &logs.shape()).unwrap();
        let mut whole = AccessLog::new();
        for part in &logs.parts {
            whole.append(part.clone());
        }
        prop_assert_eq!(joined.tasks(), whole.tasks());
        for t in 0..whole.tasks() {
            prop_assert_eq!(joined.task(t), whole.task(t));
        }
    }

    #[test]
    fn fuzz_log_random_bodies(
        logs in logs(),
        bodies in prop::collection::vec(random_bytes(), 1..5),
        threads in 1usize..5,
    ) {
        // Headers a peer would send for its share, then anything.
        let parts: Vec<Vec<u8>> = logs
            .encoded()
            .into_iter()
            .zip(bodies.iter().cycle())
            .map(|(good, body)| [&good[..24], body].concat())
            .collect();
        if let Ok(log) = AccessLog::from_byte_parts(&parts, &logs.shape()) {
            let first = logs.shares[0].start;
            plan_everywhere(log, &logs.key_spaces, parts.len(), threads, first);
        }
    }

    #[test]
    fn fuzz_log_mutated(
        logs in logs(),
        part in any::<usize>(),
        ms in mutations(),
        threads in 1usize..5,
    ) {
        let mut parts = logs.encoded();
        let p = part % parts.len();
        mutate(&mut parts[p], &ms);
        match AccessLog::from_byte_parts(&parts, &logs.shape()) {
            Ok(log) => {
                // What is accepted names only keys of the tables.
                for t in 0..log.tasks() {
                    for a in log.task(t) {
                        prop_assert!((a.key() as usize) < logs.key_spaces[a.slot()]);
                    }
                }
                let first = logs.shares[0].start;
                plan_everywhere(log, &logs.key_spaces, parts.len(), threads, first);
            }
            Err(bad) => prop_assert_eq!(bad.part, p, "{}", bad),
        }
    }

    #[test]
    fn fuzz_log_random_parts(parts in prop::collection::vec(random_bytes(), 1..4)) {
        let shares: Vec<Range<usize>> = (0..parts.len()).map(|p| p..p + 1).collect();
        let _ = AccessLog::from_byte_parts(&parts, &LogShape::new(&[4, 4], &shares));
    }
}

// ---------------------------------------------------------------------------------------
// Collectives: every typed value a rank receives from another (the checkpoints'
// agreement, outcomes, fingerprints, operator entries and verdicts).

/// Rank 0's collectives, with rank 1 of a 2-rank in-memory job having sent `bytes` as
/// its part of the first collective of `kind` (tags of [`tags`]).
fn rank_0_receiving(bytes: Vec<u8>, kind: u64) -> Comm {
    let ranks = MemCluster::new(2).into_transports();
    ranks[1].send(0, kind, bytes).expect("a live cluster");
    Comm::new(ranks[0].clone()).with_timeout(Duration::from_secs(5))
}

/// Rank 1's collectives, rank 0 having sent `bytes` with `tag` (the first collective of a
/// kind of [`tags`] has the kind's tag, the second that plus one).
fn rank_1_receiving(bytes: Vec<u8>, tag: u64) -> Comm {
    let ranks = MemCluster::new(2).into_transports();
    ranks[0].send(1, tag, bytes).expect("a live cluster");
    Comm::new(ranks[1].clone()).with_timeout(Duration::from_secs(5))
}

/// Every way the runtime receives a typed value from another rank, fed `bytes`.
fn receive_everything(bytes: &[u8]) {
    let c = || rank_0_receiving(bytes.to_vec(), tags::COLLECTIVE);
    let _ = c().allgather(vec![1u64, 2]);
    let _ = c().allgather(vec![(1u64, "x".to_string())]);
    let _ = c().allgather(7u64);
    let _ = c().allgather(Some("status".to_string()));
    let _ = c().gather_outcomes(Ok(vec![1u8, 2]));
    let _ = c().gather_outcomes(Ok(()));
    let _ = c().gather(0, (3usize, vec![1.5f64]));
    let _ = c().allreduce(2usize, |a, b| a.saturating_add(b));
    let _ = c().exchange(vec![Vec::new(), Vec::new()]);
    let _ = rank_1_receiving(bytes.to_vec(), tags::COLLECTIVE).broadcast(0, Ok::<(), String>(()));
    // Rank 1 sends its value to rank 0, then receives the result (the second collective tag).
    let _ = rank_1_receiving(bytes.to_vec(), tags::COLLECTIVE + 1).allreduce(1u64, |a, b| a ^ b);
    // Operator entries (at rank 0) and verdicts (at the others).
    let _ = rank_0_receiving(bytes.to_vec(), tags::OPERATOR).enter_operator("s", "t", vec![1]);
    let _ = rank_1_receiving(bytes.to_vec(), tags::OPERATOR).enter_operator("s", "t", vec![]);
}

fn enc<T: serde::Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).expect("test values encode")
}

/// Valid encodings of what the collectives carry, to mutate.
fn collective_message() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u64>(), 0..8).prop_map(|v| enc(&v)),
        prop::collection::vec((any::<u64>(), ".{0,8}"), 0..4).prop_map(|v| enc(&v)),
        prop::option::of(".{0,16}").prop_map(|v| enc(&v)),
        prop::collection::vec(any::<u8>(), 0..16).prop_map(|v| enc(&Ok::<Vec<u8>, String>(v))),
        (".{0,12}", ".{0,12}").prop_map(|(site, task)| enc(&(site, task))),
        // A verdict `Go { captures }`: variant 0, then the bytes.
        prop::collection::vec(any::<u8>(), 0..16).prop_map(|captures| enc(&(0u8, captures))),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_collectives_random(bytes in random_bytes()) {
        receive_everything(&bytes);
    }

    #[test]
    fn fuzz_collectives_mutated(good in collective_message(), ms in mutations()) {
        let mut bytes = good;
        mutate(&mut bytes, &ms);
        receive_everything(&bytes);
    }
}

// ---------------------------------------------------------------------------------------
// Elements moved between ranks during a distributed loop, and store requests.

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_exchanged_elements(bytes in random_bytes(), keys in prop::collection::vec(0u64..8, 0..8)) {
        // What `Exchanger` does with a peer's message: a status, then the elements of the
        // keys the plan says, into the table.
        let Ok((_status, mut rest)) = postcard::take_from_bytes::<Option<String>>(&bytes) else {
            return Ok(());
        };
        let mut floats = vec![0f64; 8];
        let mut strings = vec![String::new(); 8];
        let mut rows = vec![Vec::<u32>::new(); 8];
        // SAFETY: each buffer holds 8 initialised elements, more than any key, and nothing
        // else touches it.
        unsafe {
            let mut r = rest;
            let _ = crate::dds::table::unpack_elements::<f64>(0, floats.as_mut_ptr().cast(), keys[..].into(), &mut r);
            let mut r = rest;
            let _ = crate::dds::table::unpack_elements::<String>(1, strings.as_mut_ptr().cast(), keys[..].into(), &mut r);
            let _ = crate::dds::table::unpack_elements::<Vec<u32>>(2, rows.as_mut_ptr().cast(), keys[..].into(), &mut rest);
        }
    }

    #[test]
    fn fuzz_store_requests(bytes in random_bytes(), ms in mutations(), keys in prop::collection::vec(0u64..20, 0..6)) {
        let mut shard = Shard::new(5..15, vec![1.0f64; 10]);
        let _ = shard.handle(&bytes);
        let _ = Shard::<f64>::decode_values(&bytes);
        let items: Vec<(u64, f64)> = keys.iter().map(|&k| (k, 0.5)).collect();
        for good in [
            Request::encode_get(&keys).unwrap(),
            Request::encode_put(&items).unwrap(),
            Request::encode_add(&items).unwrap(),
        ] {
            let mut bytes = good;
            mutate(&mut bytes, &ms);
            // Bits, not values: an accepted mutated `Put` may have stored a NaN.
            let bits = |s: &Shard<f64>| s.data().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let before = bits(&shard);
            if shard.handle(&bytes).is_err() {
                prop_assert_eq!(bits(&shard), before, "a refused request changes nothing");
            }
        }
        let _ = postcard::from_bytes::<Request>(&bytes);
    }
}

/// The harness itself: mutations do what they say.
#[test]
fn mutations_change_what_they_say() {
    let mut b = vec![0u8; 10];
    mutate(&mut b, &[Mutation::SetU32(0, u32::MAX)]);
    assert_eq!(&b[..4], &[0xff; 4]);
    mutate(&mut b, &[Mutation::SetU64(2, 1)]);
    assert_eq!(b, [0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0]);
    mutate(&mut b, &[Mutation::Truncate(4)]);
    assert_eq!(b.len(), 4);
    let mut b = vec![];
    mutate(
        &mut b,
        &[
            Mutation::InsertVarint(7, 300),
            Mutation::FlipBit(0, 0),
            Mutation::SetU64(0, 9),
        ],
    );
    assert_eq!(b, [0xac ^ 1, 0x02], "too short for a u64: unchanged");
}

// ---------------------------------------------------------------------------------------
// Deadlock probes from other ranks, handled by the mailbox whatever the driver does.

fn probe() -> impl Strategy<Value = Probe> {
    (
        0usize..3,
        any::<u64>(),
        prop::collection::vec((0usize..3, any::<u64>(), 0usize..3), 0..4),
    )
        .prop_map(|(origin, nonce, hops)| Probe {
            origin,
            nonce,
            hops: hops
                .into_iter()
                .map(|(rank, tag, awaited)| Hop { rank, tag, awaited })
                .collect(),
        })
}

proptest! {
    #![proptest_config(config())]

    /// Probes and their way back, valid or mutated, from any rank to a mailbox whose
    /// driver waits: never a panic, and what the mailbox sends on decodes.
    #[test]
    fn fuzz_probes_mutated(p in probe(), ms in mutations(), from in 0usize..3, back in any::<bool>()) {
        let m = Mailbox::new(3);
        let sent = std::sync::Arc::new(crate::sync::Mutex::new(Vec::new()));
        let log = sent.clone();
        m.set_replier(0, Box::new(move |to, tag, bytes| log.lock().push((to, tag, bytes))));
        m.pretend_waiting(p.nonce >> 20, 1, tags::COLLECTIVE | 1);
        let mut bytes = encode_probe(&p);
        mutate(&mut bytes, &ms);
        let tag = if back { tags::PROBE_BACK } else { tags::PROBE };
        m.deliver(from, tag, bytes);
        for (to, tag, bytes) in sent.lock().iter() {
            prop_assert!(*to < 3);
            prop_assert!(*tag == tags::PROBE || *tag == tags::PROBE_BACK);
            prop_assert!(decode_probe(bytes, 3).is_some());
        }
    }
}
