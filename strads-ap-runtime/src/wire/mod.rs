//! What goes over the wire between ranks, independent of any socket (sans-IO).
//!
//! Two kinds of traffic share a connection:
//!
//! * **Handshake**, once per connection, on its first bidirectional stream: each side sends a
//!   [`Hello`] (protocol version, job id, rank, world size, a fresh nonce); then each proves it
//!   holds the job's secret with an HMAC-SHA256 over both hellos and the TLS session's
//!   exported keying material ([`proof`]). Binding the proof to the TLS session means a
//!   relay in the middle cannot reuse it, so certificates need not be checked: knowing the
//!   secret is what authenticates a rank. Handshake messages are length-prefixed postcard
//!   ([`encode_handshake`], [`handshake_len`], [`decode_handshake`]) and at most
//!   [`MAX_HANDSHAKE`] bytes.
//! * **Data**: each unidirectional stream carries one *batch*: the batch's sequence number
//!   (per direction of a connection) and then frames `tag (u64) | length (u32) | payload`
//!   ([`BatchWriter`], [`frame_header`], [`parse_batch`]). Frames longer than the receiver's limit are refused
//!   before any allocation. Sequence numbers let a receiver read streams concurrently and
//!   still deliver messages in send order ([`Reorder`]).

use std::collections::BTreeMap;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Version of the wire protocol; peers with another version are refused.
pub const PROTOCOL_VERSION: u16 = 1;
/// First bytes of every hello.
pub const MAGIC: [u8; 8] = *b"STRADSAP";
/// ALPN protocol id of strads-ap connections.
pub const ALPN: &[u8] = b"strads-ap/1";
/// Largest handshake message.
pub const MAX_HANDSHAKE: usize = 4096;
/// Default largest data frame (256 MiB); see [`crate::transport::QuicOptions`].
pub const DEFAULT_MAX_FRAME: usize = 256 << 20;
/// Bytes of a frame header: tag (8) and length (4).
pub const FRAME_HEADER: usize = 12;
/// Label of the TLS exporter the handshake proofs are bound to.
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER-strads-ap-handshake";

/// What a rank says about itself when it connects or accepts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`PROTOCOL_VERSION`].
    pub version: u16,
    /// The job id (`STRADS_JOB_ID`): ranks of other jobs are refused.
    pub job: String,
    /// The sender's rank.
    pub rank: u32,
    /// The sender's world size.
    pub world: u32,
    /// Fresh random bytes, so that every proof is new.
    pub nonce: [u8; 32],
}

impl Hello {
    /// A hello with a fresh nonce.
    pub fn new(job: &str, rank: usize, world: usize) -> Self {
        Hello {
            magic: MAGIC,
            version: PROTOCOL_VERSION,
            job: job.to_string(),
            rank: rank as u32,
            world: world as u32,
            nonce: rand::random(),
        }
    }

    /// Why a peer's hello is unacceptable to a rank of `job` in a world of `world`, if it is.
    pub fn check(&self, job: &str, world: usize) -> Result<(), String> {
        if self.magic != MAGIC {
            return Err("not a strads-ap peer (bad magic)".into());
        }
        if self.version != PROTOCOL_VERSION {
            return Err(format!(
                "protocol version {} (this rank speaks {PROTOCOL_VERSION})",
                self.version
            ));
        }
        if self.job != job {
            return Err(format!("job {:?} (this rank is in job {job:?})", self.job));
        }
        if self.world as usize != world {
            return Err(format!("world size {} (this job has {world})", self.world));
        }
        if self.rank as usize >= world {
            return Err(format!("rank {} out of range 0..{world}", self.rank));
        }
        Ok(())
    }
}

/// A handshake message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Handshake {
    /// See [`Hello`].
    Hello(Hello),
    /// HMAC-SHA256 proof of the secret, see [`proof`].
    Proof([u8; 32]),
    /// The other side refuses the connection, and says why.
    Refused(String),
}

/// Which side of a connection computes a proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The side that connected.
    Client,
    /// The side that accepted.
    Server,
}

/// The proof that `role` holds `secret`: HMAC-SHA256 keyed by the secret over the role, the
/// TLS session's exported keying material and both hellos.
pub fn proof(
    secret: &[u8],
    role: Role,
    exporter: &[u8; 32],
    client: &Hello,
    server: &Hello,
) -> [u8; 32] {
    keyed(secret, role, exporter, client, server)
        .finalize()
        .into_bytes()
        .into()
}

/// Checks a peer's proof (in constant time).
pub fn verify(
    secret: &[u8],
    role: Role,
    exporter: &[u8; 32],
    client: &Hello,
    server: &Hello,
    claimed: &[u8; 32],
) -> bool {
    keyed(secret, role, exporter, client, server)
        .verify_slice(claimed)
        .is_ok()
}

fn keyed(
    secret: &[u8],
    role: Role,
    exporter: &[u8; 32],
    client: &Hello,
    server: &Hello,
) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key size");
    mac.update(match role {
        Role::Client => b"strads-ap client proof",
        Role::Server => b"strads-ap server proof",
    });
    mac.update(exporter);
    for hello in [client, server] {
        mac.update(&postcard::to_stdvec(hello).expect("a hello encodes"));
    }
    mac
}

/// Encodes a handshake message with its length prefix.
pub fn encode_handshake(msg: &Handshake) -> Vec<u8> {
    let body = postcard::to_stdvec(msg).expect("handshake messages encode");
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Decodes a length prefix of a handshake message, refusing oversized ones.
pub fn handshake_len(prefix: [u8; 4]) -> Result<usize, String> {
    let len = u32::from_le_bytes(prefix) as usize;
    if len > MAX_HANDSHAKE {
        return Err(format!(
            "handshake message of {len} bytes (limit {MAX_HANDSHAKE})"
        ));
    }
    Ok(len)
}

/// Decodes the body of a handshake message.
pub fn decode_handshake(body: &[u8]) -> Result<Handshake, String> {
    postcard::from_bytes(body).map_err(|e| format!("malformed handshake message: {e}"))
}

/// Frames a batch of messages for one stream, as a list of byte chunks: headers and small
/// payloads are packed together; a large payload is its own chunk, moved, never copied.
#[derive(Debug)]
pub struct BatchWriter {
    chunks: Vec<Bytes>,
    small: Vec<u8>,
    len: usize,
    frames: usize,
}

impl BatchWriter {
    /// Payloads at least this long travel as their own chunk.
    pub const LARGE: usize = 64 << 10;

    /// Starts batch number `seq`.
    pub fn new(seq: u64) -> Self {
        let mut small = Vec::with_capacity(4096);
        small.extend_from_slice(&seq.to_le_bytes());
        BatchWriter {
            chunks: Vec::new(),
            small,
            len: 8,
            frames: 0,
        }
    }

    /// Appends one message.
    ///
    /// # Panics
    /// If the payload is longer than `u32::MAX` bytes (the transport refuses such sends
    /// earlier, with an error).
    pub fn push(&mut self, tag: u64, payload: Bytes) {
        let len = u32::try_from(payload.len()).expect("payload length checked by the sender");
        self.small.extend_from_slice(&tag.to_le_bytes());
        self.small.extend_from_slice(&len.to_le_bytes());
        if payload.len() >= Self::LARGE {
            self.chunks.push(std::mem::take(&mut self.small).into());
            self.chunks.push(payload);
        } else {
            self.small.extend_from_slice(&payload);
        }
        self.len += FRAME_HEADER + len as usize;
        self.frames += 1;
    }

    /// Bytes so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no message was pushed.
    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// The stream's bytes, in chunks.
    pub fn finish(mut self) -> Vec<Bytes> {
        if !self.small.is_empty() {
            self.chunks.push(self.small.into());
        }
        self.chunks
    }
}

/// A frame header read from a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Message tag.
    pub tag: u64,
    /// Payload length.
    pub len: usize,
}

/// Parses a frame header, refusing payloads longer than `max_frame`.
pub fn frame_header(bytes: [u8; FRAME_HEADER], max_frame: usize) -> Result<FrameHeader, String> {
    let tag = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let len = u32::from_le_bytes(bytes[8..].try_into().expect("4 bytes")) as usize;
    if len > max_frame {
        return Err(format!(
            "oversized frame: {len} bytes (limit {max_frame}) with tag {tag:#x}"
        ));
    }
    Ok(FrameHeader { tag, len })
}

/// Messages of one batch: (tag, payload) in send order.
pub type Messages = Vec<(u64, Vec<u8>)>;

/// Splits a whole batch (the concatenated chunks of [`BatchWriter::finish`]) into its sequence number and
/// messages; for tests and tools (the transport reads streams incrementally).
pub fn parse_batch(bytes: &[u8], max_frame: usize) -> Result<(u64, Messages), String> {
    if bytes.len() < 8 {
        return Err(format!(
            "batch of {} bytes has no sequence number",
            bytes.len()
        ));
    }
    let seq = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let mut rest = &bytes[8..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        if rest.len() < FRAME_HEADER {
            return Err(format!("truncated frame header ({} bytes)", rest.len()));
        }
        let h = frame_header(
            rest[..FRAME_HEADER].try_into().expect("12 bytes"),
            max_frame,
        )?;
        rest = &rest[FRAME_HEADER..];
        if rest.len() < h.len {
            return Err(format!(
                "truncated frame: {} of {} bytes",
                rest.len(),
                h.len
            ));
        }
        out.push((h.tag, rest[..h.len].to_vec()));
        rest = &rest[h.len..];
    }
    Ok((seq, out))
}

/// Puts batches that may arrive out of order back in sequence.
///
/// What it holds waiting for an earlier batch is bounded: at most [`Reorder::MAX_AHEAD`]
/// sequence numbers ahead, and at most its byte limit in all (a peer's batches arrive out
/// of order only while a lost packet of an earlier one is resent, which holds back a few
/// congestion windows; a peer that withholds a batch to make this rank hold the rest is
/// refused).
#[derive(Debug)]
pub struct Reorder<T> {
    next: u64,
    pending: BTreeMap<u64, (T, usize)>,
    held: usize,
    max_bytes: usize,
}

impl<T> Reorder<T> {
    /// How far ahead of the next expected batch a batch may be.
    pub const MAX_AHEAD: u64 = 1 << 16;

    /// Expects batch 0 first, and holds at most `max_bytes` waiting for earlier batches.
    pub fn new(max_bytes: usize) -> Self {
        Reorder {
            next: 0,
            pending: BTreeMap::new(),
            held: 0,
            max_bytes,
        }
    }

    /// Takes batch `seq` of `bytes` bytes; returns the batches now deliverable, in order.
    /// A repeated or stale sequence number, one too far ahead, or a batch that would make
    /// it hold more than its limit is an error (a confused or hostile peer).
    pub fn push(&mut self, seq: u64, batch: T, bytes: usize) -> Result<Vec<T>, String> {
        if seq < self.next || self.pending.contains_key(&seq) {
            return Err(format!("batch {seq} received twice"));
        }
        if seq - self.next > Self::MAX_AHEAD {
            return Err(format!(
                "batch {seq} is too far ahead (expected {})",
                self.next
            ));
        }
        if seq != self.next && self.held.saturating_add(bytes) > self.max_bytes {
            return Err(format!(
                "batch {seq} would make {} bytes wait for batch {} (limit {})",
                self.held.saturating_add(bytes),
                self.next,
                self.max_bytes
            ));
        }
        self.held += bytes;
        self.pending.insert(seq, (batch, bytes));
        let mut out = Vec::new();
        while let Some((b, n)) = self.pending.remove(&self.next) {
            out.push(b);
            self.held -= n;
            self.next += 1;
        }
        Ok(out)
    }

    /// Batches waiting for an earlier one.
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// Bytes of the batches waiting for an earlier one.
    pub fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip() {
        let mut w = BatchWriter::new(7);
        assert!(w.is_empty());
        w.push(1, Bytes::from_static(b"hello"));
        w.push(u64::MAX, Bytes::new());
        w.push(42, vec![9; 100_000].into());
        w.push(43, vec![8; 1000].into());
        assert_eq!(w.len(), 8 + 4 * 12 + 5 + 100_000 + 1000);
        let chunks = w.finish();
        assert_eq!(chunks.len(), 3, "the large payload travels alone");
        let bytes = chunks.concat();
        assert_eq!(bytes.len(), 8 + 4 * 12 + 5 + 100_000 + 1000);
        let (seq, msgs) = parse_batch(&bytes, 1 << 20).unwrap();
        assert_eq!(seq, 7);
        assert_eq!(
            msgs,
            vec![
                (1, b"hello".to_vec()),
                (u64::MAX, vec![]),
                (42, vec![9; 100_000]),
                (43, vec![8; 1000])
            ]
        );
    }

    #[test]
    fn oversized_and_truncated_frames_are_refused() {
        let mut w = BatchWriter::new(0);
        w.push(3, vec![0; 100].into());
        let bytes = w.finish().concat();
        let err = parse_batch(&bytes, 99).unwrap_err();
        assert!(
            err.contains("oversized frame: 100 bytes (limit 99)"),
            "{err}"
        );
        let err = parse_batch(&bytes[..bytes.len() - 1], 1000).unwrap_err();
        assert!(err.contains("truncated frame: 99 of 100"), "{err}");
        let err = parse_batch(&bytes[..12], 1000).unwrap_err();
        assert!(err.contains("truncated frame header"), "{err}");
        assert!(parse_batch(&[1, 2], 10).is_err());
    }

    #[test]
    fn reorder_delivers_in_sequence() {
        let mut r = Reorder::new(100);
        assert_eq!(r.push(1, "b", 10).unwrap(), Vec::<&str>::new());
        assert_eq!(r.push(2, "c", 10).unwrap(), Vec::<&str>::new());
        assert_eq!((r.waiting(), r.held()), (2, 20));
        assert_eq!(r.push(0, "a", 10).unwrap(), vec!["a", "b", "c"]);
        assert_eq!(r.held(), 0);
        assert_eq!(r.push(3, "d", 10).unwrap(), vec!["d"]);
        assert!(r.push(2, "again", 1).unwrap_err().contains("twice"));
        assert!(r.push(u64::MAX, "far", 1).unwrap_err().contains("too far"));
        assert!(r
            .push(5 + (1 << 16), "far", 1)
            .unwrap_err()
            .contains("too far"));
    }

    #[test]
    fn reorder_holds_at_most_its_limit_waiting() {
        let mut r = Reorder::new(100);
        assert!(r.push(1, 1, 60).unwrap().is_empty());
        let err = r.push(2, 2, 41).unwrap_err();
        assert!(
            err.contains("would make 101 bytes wait for batch 0"),
            "{err}"
        );
        // The expected batch is never held, whatever its size.
        assert_eq!(r.push(0, 0, 1000).unwrap(), vec![0, 1]);
        assert!(r.push(3, 3, 100).unwrap().is_empty());
    }

    #[test]
    fn proofs_bind_secret_session_and_hellos() {
        let c = Hello::new("job", 1, 3);
        let s = Hello::new("job", 0, 3);
        let ex = [5u8; 32];
        let p = proof(b"secret", Role::Client, &ex, &c, &s);
        assert!(verify(b"secret", Role::Client, &ex, &c, &s, &p));
        assert!(!verify(b"other", Role::Client, &ex, &c, &s, &p));
        assert!(!verify(b"secret", Role::Server, &ex, &c, &s, &p));
        assert!(!verify(b"secret", Role::Client, &[6; 32], &c, &s, &p));
        let c2 = Hello::new("job", 1, 3);
        assert!(!verify(b"secret", Role::Client, &ex, &c2, &s, &p));
    }

    #[test]
    fn hellos_are_checked() {
        let h = Hello::new("job", 2, 4);
        assert!(h.check("job", 4).is_ok());
        assert!(h.check("other", 4).unwrap_err().contains("job \"job\""));
        assert!(h.check("job", 3).unwrap_err().contains("world size 4"));
        let mut bad = h.clone();
        bad.version = 99;
        assert!(bad
            .check("job", 4)
            .unwrap_err()
            .contains("protocol version 99"));
        bad = h.clone();
        bad.magic = *b"GARBAGE!";
        assert!(bad.check("job", 4).unwrap_err().contains("magic"));
        bad = h;
        bad.rank = 4;
        assert!(bad.check("job", 4).unwrap_err().contains("out of range"));
    }

    #[test]
    fn handshake_messages_round_trip_and_are_bounded() {
        let m = Handshake::Hello(Hello::new("j", 0, 2));
        let bytes = encode_handshake(&m);
        let len = handshake_len(bytes[..4].try_into().unwrap()).unwrap();
        assert_eq!(decode_handshake(&bytes[4..4 + len]).unwrap(), m);
        assert!(handshake_len(u32::MAX.to_le_bytes()).is_err());
        assert!(decode_handshake(&[0xff, 0xff, 0xff]).is_err());
    }
}
