//! Reconnaissance execution: what each task reads and writes.
//!
//! Before the first real run of a loop operator the engine runs the body once per task in
//! *recording* mode: reads return real values, writes go to a per-task scratch copy, and
//! every access is logged as (table slot, key, read or write). The log of a task is sorted
//! and deduplicated as soon as the task ends, then appended to a compact CSR-style
//! [`AccessLog`]: one flat `Vec<u64>` of entries and one offset per task.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::access::LoopIndex;

/// Most tables one loop may capture.
pub const MAX_TABLES: usize = 255;
const SLOT_SHIFT: u32 = 56;
const KEY_MASK: u64 = (1 << (SLOT_SHIFT - 1)) - 1;

/// One logged access, packed: table slot (8 bits), key (55 bits), write flag (1 bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Access(u64);

impl Access {
    /// Packs an access. Keys above 2^55 (hashed map keys) are folded into range.
    #[inline]
    pub fn new(slot: usize, key: u64, write: bool) -> Self {
        debug_assert!(slot < MAX_TABLES);
        Access(((slot as u64) << SLOT_SHIFT) | ((key & KEY_MASK) << 1) | write as u64)
    }
    /// The table slot (position among the loop's captured tables).
    #[inline]
    pub fn slot(self) -> usize {
        (self.0 >> SLOT_SHIFT) as usize
    }
    /// The element key.
    #[inline]
    pub fn key(self) -> u64 {
        (self.0 >> 1) & KEY_MASK
    }
    /// Whether the access writes (or may write: `IndexMut` counts as a write).
    #[inline]
    pub fn write(self) -> bool {
        self.0 & 1 == 1
    }
}

/// The access sets of consecutive tasks, CSR style.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Segment {
    /// Where each task's accesses start in `entries` (a segment holds fewer than 2^32).
    offsets: Vec<u32>,
    entries: Vec<Access>,
    /// Per slot (a bit set): whether some task of the segment writes it.
    written: [u64; 4],
    /// Accesses of the running task that found no room (see [`Recorder::log`]).
    lost: usize,
}

/// Room for at least this many more accesses is made in a log before each task starts,
/// so that logging an access is a store and a compare, with no call that could grow the
/// log: a body's inner loop then keeps its values in registers (a call there, however
/// rarely taken, makes the compiler keep them in memory: a recorded AdaGrad MF epoch took
/// 134-139 ms with one and 91 without). A task that logs more than this is run again with
/// more room (reconnaissance) or leaves its call unplanned (a recorded run, whose tasks
/// write the tables and cannot run twice): the room grows for every later task, in every
/// loop of the process.
static LOG_HEADROOM: AtomicUsize = AtomicUsize::new(DEFAULT_LOG_HEADROOM);

/// [`LOG_HEADROOM`] to start with: 1 MiB of accesses (131,072), of address space; its
/// pages are used only by a task that logs that much (a PageRank task of a hub node with
/// 43,000 in-neighbours logs 86,000).
const DEFAULT_LOG_HEADROOM: usize = 1 << 17;

/// Raises [`LOG_HEADROOM`] to fit a task that logged `needed` accesses, with as much
/// again to spare; returns the new room.
fn grow_headroom(needed: usize) -> usize {
    let want = needed.saturating_mul(2).max(DEFAULT_LOG_HEADROOM);
    LOG_HEADROOM.fetch_max(want, Ordering::Relaxed).max(want)
}

/// How a task's log ended (see [`Recorder::end_task`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its accesses are logged.
    Logged,
    /// It logged more than its room held: nothing of it is kept, and it must run again
    /// (reconnaissance only: its writes went to scratch copies).
    Again,
}

impl Segment {
    fn new() -> Self {
        Segment {
            offsets: vec![0],
            entries: Vec::new(),
            written: [0; 4],
            lost: 0,
        }
    }

    fn tasks(&self) -> usize {
        self.offsets.len() - 1
    }

    /// An empty segment with room for `tasks` tasks of `entries` accesses in all, its
    /// memory already mapped: one write per page, so that the recording thread takes no
    /// page faults (a fresh page costs microseconds on a virtual machine).
    fn with_room(tasks: usize, entries: usize) -> Self {
        let mut seg = Segment::new();
        seg.offsets.reserve(tasks);
        // With the room every task needs beyond its share (see `LOG_HEADROOM`), whose
        // pages stay untouched until a task uses them.
        seg.entries
            .reserve(entries.saturating_add(LOG_HEADROOM.load(Ordering::Relaxed)));
        touch_pages(seg.offsets.spare_capacity_mut(), 0);
        let spare = seg.entries.spare_capacity_mut();
        let share = entries.min(spare.len());
        touch_pages(&mut spare[..share], Access(0));
        seg
    }

    #[inline]
    fn task(&self, t: usize) -> &[Access] {
        &self.entries[self.offsets[t] as usize..self.offsets[t + 1] as usize]
    }

    fn push_task(&mut self, set: &mut Vec<Access>) {
        self.entries.extend_from_slice(set);
        set.clear();
        self.close_task();
    }

    /// Notes in `written` whether `a` writes its table.
    #[inline(always)]
    fn note(&mut self, a: Access) {
        let s = a.slot();
        self.written[s >> 6] |= (a.write() as u64) << (s & 63);
    }

    /// Where the open task's accesses start.
    #[inline(always)]
    fn open_start(&self) -> usize {
        *self.offsets.last().expect("offsets start at 0") as usize
    }

    /// Closes the task whose accesses were pushed after the last offset: sorts and
    /// deduplicates them in place and notes the tables they write.
    #[inline]
    fn close_task(&mut self) {
        let start = self.open_start();
        let kept = self.settle(start, self.entries.len());
        self.entries.truncate(start + kept);
        self.push_offset();
    }

    /// Sorts and deduplicates the accesses in `entries[start..end]` (see [`normalize`])
    /// and notes the tables they write; returns how many are kept, at the front.
    #[inline(always)]
    fn settle(&mut self, start: usize, end: usize) -> usize {
        let set = &mut self.entries[start..end];
        // Bodies mostly log each key once, in slot order: then there is nothing to sort
        // or merge. One branch-free pass finds out.
        let mut increasing = true;
        for i in 1..set.len() {
            increasing &= set[i - 1].0 >> 1 < set[i].0 >> 1;
        }
        let kept = if increasing {
            set.len()
        } else {
            normalize(set)
        };
        for i in start..start + kept {
            self.note(self.entries[i]);
        }
        kept
    }

    /// Closes every task of a segment whose tasks were ended raw (offsets pushed, entries
    /// neither sorted nor deduplicated: [`Recorder::in_place`] leaves that to a helper
    /// thread), moving the kept entries together.
    fn settle_all(&mut self) {
        let mut out = 0;
        let mut start = 0;
        for t in 0..self.tasks() {
            let end = self.offsets[t + 1] as usize;
            if out != start {
                self.entries.copy_within(start..end, out);
            }
            let kept = self.settle(out, out + end - start);
            out += kept;
            start = end;
            // `out` only shrinks against the offsets, which fit in 32 bits.
            self.offsets[t + 1] = out as u32;
        }
        self.entries.truncate(out);
        // Give back the room no task used (see `LOG_HEADROOM`): the log is complete.
        self.entries.shrink_to_fit();
    }

    /// Ends the open task at the current end of `entries`.
    #[inline(always)]
    fn push_offset(&mut self) {
        match u32::try_from(self.entries.len()) {
            Ok(end) => self.offsets.push(end),
            Err(_) => too_many_accesses(),
        }
    }

    /// Drops the accesses pushed since the last closed task.
    fn abort_task(&mut self) {
        let start = self.open_start();
        self.entries.truncate(start);
        self.lost = 0;
    }
}

/// Per-task access sets of one loop, in task order: segments of `2^shift` tasks each
/// (the last may be shorter), as reconnaissance chunks produced them, so that joining the
/// chunks copies nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessLog {
    segments: Vec<Segment>,
    shift: u32,
    tasks: usize,
}

impl Default for AccessLog {
    fn default() -> Self {
        AccessLog::new()
    }
}

impl AccessLog {
    /// An empty log.
    pub fn new() -> Self {
        AccessLog {
            segments: vec![Segment::new()],
            shift: usize::BITS - 1,
            tasks: 0,
        }
    }

    fn single(segment: Segment) -> Self {
        AccessLog {
            tasks: segment.tasks(),
            segments: vec![segment],
            shift: usize::BITS - 1,
        }
    }

    /// Builds a log from explicit per-task sets (tests, tools).
    pub fn from_tasks<I, J>(tasks: I) -> Self
    where
        I: IntoIterator<Item = J>,
        J: IntoIterator<Item = Access>,
    {
        let mut segment = Segment::new();
        for task in tasks {
            let mut set: Vec<Access> = task.into_iter().collect();
            segment.push_task(&mut set);
        }
        AccessLog::single(segment)
    }

    /// Sorts and deduplicates every task's accesses and notes the tables written: for the
    /// log of a recorder [`in place`](Recorder::in_place), which leaves that to be done on
    /// another thread. Settling a settled log changes nothing.
    pub(crate) fn settle(&mut self) {
        for seg in &mut self.segments {
            seg.settle_all();
        }
    }

    /// Accesses logged per task, on average, rounded up (before settling: with repeats).
    pub(crate) fn logged_per_task(&self) -> usize {
        let logged: usize = self.segments.iter().map(|s| s.entries.len()).sum();
        logged.div_ceil(self.tasks.max(1))
    }

    /// Joins the logs of consecutive chunks of `2^shift` tasks each (the last may be
    /// shorter) without copying them.
    ///
    /// # Panics
    /// If a chunk other than the last does not hold exactly `2^shift` tasks, or a chunk
    /// is not a single segment.
    pub(crate) fn from_chunks(shift: u32, chunks: Vec<AccessLog>) -> Self {
        let count = chunks.len();
        let mut tasks = 0;
        let segments: Vec<Segment> = chunks
            .into_iter()
            .enumerate()
            .map(|(i, mut log)| {
                assert_eq!(log.segments.len(), 1, "a chunk log is one segment");
                let seg = log.segments.pop().expect("one segment");
                assert!(
                    i + 1 == count || seg.tasks() == 1 << shift,
                    "chunk {i} holds {} tasks, not 2^{shift}",
                    seg.tasks()
                );
                tasks += seg.tasks();
                seg
            })
            .collect();
        if segments.is_empty() {
            return AccessLog::new();
        }
        AccessLog {
            segments,
            shift,
            tasks,
        }
    }

    /// Number of tasks.
    pub fn tasks(&self) -> usize {
        self.tasks
    }

    /// The deduplicated accesses of task `t`, sorted by (slot, key).
    #[inline]
    pub fn task(&self, t: usize) -> &[Access] {
        let mask = (1usize << self.shift) - 1;
        self.segments[t >> self.shift].task(t & mask)
    }

    /// Whether some task writes table slot `slot`.
    pub fn writes(&self, slot: usize) -> bool {
        self.segments
            .iter()
            .any(|s| slot < MAX_TABLES && s.written[slot >> 6] >> (slot & 63) & 1 == 1)
    }

    /// Total number of entries (after deduplication).
    pub fn entries(&self) -> usize {
        self.segments.iter().map(|s| s.entries.len()).sum()
    }

    /// Calls `f` for the tasks of `range` with their accesses, in order (faster than
    /// [`AccessLog::task`] in a loop: it walks the segments directly).
    #[inline]
    pub fn for_each_in(&self, range: std::ops::Range<usize>, mut f: impl FnMut(usize, &[Access])) {
        let end = range.end.min(self.tasks);
        let mut t = range.start.min(end);
        while t < end {
            let seg = &self.segments[t >> self.shift];
            let base = (t >> self.shift) << self.shift;
            let stop = end.min(base + seg.tasks());
            let offsets = &seg.offsets[t - base..=stop - base];
            for (i, w) in offsets.windows(2).enumerate() {
                f(t + i, &seg.entries[w[0] as usize..w[1] as usize]);
            }
            t = stop;
        }
    }

    /// The log as bytes, for other ranks, its tasks being loop indices `first..`: a header
    /// (format version, `first` and the task count, little-endian u64s), then per task its
    /// number of accesses and each access as LEB128 varints. An access is `slot << 2 |
    /// own << 1 | write`, followed by its key unless `own` says the key is the task's own
    /// loop index (`ratings[k]`, which most loops read). SGDMF's tasks take 9 bytes each
    /// this way, against 8 per access and 4 per task as raw integers.
    pub fn to_bytes(&self, first: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.tasks * 2 + self.entries() * 3);
        for word in [LOG_FORMAT, first as u64, self.tasks as u64] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        self.for_each_in(0..self.tasks, |t, set| {
            let index = (first + t) as u64;
            put_varint(&mut out, set.len() as u64);
            for a in set {
                let own = a.key() == index & KEY_MASK;
                put_varint(
                    &mut out,
                    (a.slot() as u64) << 2 | (own as u64) << 1 | a.write() as u64,
                );
                if !own {
                    put_varint(&mut out, a.key());
                }
            }
        });
        out
    }

    /// Joins logs made by [`AccessLog::to_bytes`] (consecutive task ranges, in order) into
    /// one log, checking every part against `shape` as it goes, in the one pass that
    /// decodes it: its format; that part `p` holds exactly the tasks of `shape.shares[p]`;
    /// that each task's accesses are normalised (sorted, one per element, as the planner
    /// relies on) and name a table slot below `shape.key_spaces.len()` and a key below that
    /// table's key space; and that nothing is missing or left over.
    ///
    /// The parts come from other ranks, so nothing in them is trusted: any input gives a
    /// log the planner can use or an error naming the part, never a panic, and never an
    /// allocation larger than the bytes could describe.
    pub fn from_byte_parts(parts: &[Vec<u8>], shape: &LogShape<'_>) -> Result<AccessLog, BadLog> {
        if parts.len() != shape.shares.len() {
            return Err(BadLog {
                part: parts.len().min(shape.shares.len()),
                message: format!(
                    "{} access log parts for {} shares of the tasks",
                    parts.len(),
                    shape.shares.len()
                ),
            });
        }
        let mut segment = Segment::new();
        // Capacity from the parts' sizes (a task takes a byte at least, an access two),
        // so that a lying header cannot make us reserve more than the bytes could hold.
        let total_bytes: usize = parts.iter().map(Vec::len).sum();
        segment.offsets.reserve(total_bytes / 4);
        segment.entries.reserve(total_bytes / 3);
        for (p, (bytes, share)) in parts.iter().zip(shape.shares).enumerate() {
            decode_part(&mut segment, bytes, share, shape.key_spaces)
                .map_err(|message| BadLog { part: p, message })?;
        }
        Ok(AccessLog::single(segment))
    }

    /// Appends the logs of later tasks (copying them into one segment).
    pub fn append(&mut self, other: AccessLog) {
        let mut segment = Segment::new();
        let mut set = Vec::new();
        for log in [&*self, &other] {
            for t in 0..log.tasks() {
                set.extend_from_slice(log.task(t));
                segment.push_task(&mut set);
            }
        }
        *self = AccessLog::single(segment);
    }
}

/// What the parts of a log from other ranks must hold (see [`AccessLog::from_byte_parts`]).
#[derive(Clone, Copy, Debug)]
pub struct LogShape<'a> {
    /// Per table slot: its number of keys (a DVector's length, a map's entries). An access
    /// must name a slot below `key_spaces.len()` and a key below that slot's key space.
    pub key_spaces: &'a [usize],
    /// Per part (per rank): the loop indices of its tasks, consecutive and in order.
    pub shares: &'a [Range<usize>],
}

/// Why [`AccessLog::from_byte_parts`] refused a log: which part (the rank that sent it),
/// and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLog {
    /// The part, in the order given (the sender's rank).
    pub part: usize,
    /// What is wrong, e.g. `task 7 (loop index 107): key 1000 of table slot 0, which has
    /// 10 keys`.
    pub message: String,
}

impl<'a> LogShape<'a> {
    /// The shape of a log over tables of `key_spaces` keys whose parts hold `shares`.
    pub fn new(key_spaces: &'a [usize], shares: &'a [Range<usize>]) -> Self {
        LogShape { key_spaces, shares }
    }
}

impl std::fmt::Display for BadLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "access log part {}: {}", self.part, self.message)
    }
}

impl std::error::Error for BadLog {}

/// Decodes one part of a log (loop indices `share`) onto `segment`, checking it as
/// [`AccessLog::from_byte_parts`] says; the error says what is wrong.
fn decode_part(
    segment: &mut Segment,
    bytes: &[u8],
    share: &Range<usize>,
    key_spaces: &[usize],
) -> Result<(), String> {
    let ends_early = || "it ends early".to_string();
    let word = |i: usize| -> Result<u64, String> {
        let w = bytes.get(i * 8..i * 8 + 8).ok_or_else(ends_early)?;
        Ok(u64::from_le_bytes(w.try_into().map_err(|_| ends_early())?))
    };
    let (format, first, tasks) = (word(0)?, word(1)?, word(2)?);
    if format != LOG_FORMAT {
        return Err(format!(
            "format {format}, expected {LOG_FORMAT} (ranks built from different versions?)"
        ));
    }
    if first != share.start as u64 || tasks != share.len() as u64 {
        return Err(format!(
            "it holds {tasks} tasks from loop index {first}; this rank's share is {} tasks \
             from {}",
            share.len(),
            share.start
        ));
    }
    let mut at = 24usize;
    if tasks > (bytes.len() - at) as u64 {
        return Err(ends_early());
    }
    let slots = key_spaces.len();
    let varint = |at: &mut usize| get_varint(bytes, at).ok_or_else(ends_early);
    for t in 0..tasks {
        let index = first.wrapping_add(t);
        let count = varint(&mut at)?;
        let mut prev: Option<u64> = None;
        for _ in 0..count {
            let head = varint(&mut at)?;
            let slot = head >> 2;
            let own = head >> 1 & 1 == 1;
            let key = match own {
                true => index,
                false => varint(&mut at)?,
            };
            let bad = |why: String| format!("task {t} (loop index {index}): {why}");
            if slot >= slots as u64 {
                return Err(bad(format!("table slot {slot}, but the loop has {slots}")));
            }
            let space = key_spaces[slot as usize];
            if key >= space as u64 || key > KEY_MASK {
                return Err(bad(format!(
                    "key {key} of table slot {slot}, which has {space} keys"
                )));
            }
            let a = Access::new(slot as usize, key, head & 1 == 1);
            // Sets arrive normalised: checked, not sorted again.
            if prev.is_some_and(|q| q >= a.0 >> 1) {
                return Err(bad("its accesses are not sorted and distinct".into()));
            }
            prev = Some(a.0 >> 1);
            segment.note(a);
            segment.entries.push(a);
        }
        if segment.entries.len() > u32::MAX as usize {
            return Err(format!(
                "the access logs hold more than {} accesses; split the loop into several \
                 calls",
                u32::MAX
            ));
        }
        segment.push_offset();
    }
    if at != bytes.len() {
        return Err(format!("{} trailing bytes", bytes.len() - at));
    }
    Ok(())
}

/// Version of [`AccessLog::to_bytes`]'s format.
const LOG_FORMAT: u64 = 2;

/// Appends `v` as an unsigned LEB128 varint.
#[inline(always)]
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads an unsigned LEB128 varint at `*at`, moving past it; `None` if the bytes end
/// first or it does not fit in 64 bits.
#[inline(always)]
fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    // Most values (counts, headers, own-index reads) take one byte.
    let first = *bytes.get(*at)?;
    if first < 0x80 {
        *at += 1;
        return Some(u64::from(first));
    }
    get_long_varint(bytes, at)
}

/// [`get_varint`] of a value of two bytes or more.
#[inline(never)]
fn get_long_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        let bits = u64::from(b & 0x7f);
        if shift == 63 && bits > 1 {
            return None;
        }
        v |= bits << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// A segment's offsets are 32 bits: a loop whose tasks log 2^32 accesses or more between
/// two chunk boundaries is refused.
#[cold]
#[inline(never)]
fn too_many_accesses() -> ! {
    panic!(
        "strads-ap: one chunk of tasks logged more than {} accesses during reconnaissance; \
         split the loop into several calls",
        u32::MAX
    )
}

/// Writes `value` into one element of each memory page of `spare` (a vector's spare
/// capacity), so that the pages are mapped before they are used.
fn touch_pages<T: Copy>(spare: &mut [std::mem::MaybeUninit<T>], value: T) {
    const PAGE: usize = 4096;
    let step = (PAGE / std::mem::size_of::<T>().max(1)).max(1);
    for slot in spare.iter_mut().step_by(step) {
        slot.write(value);
    }
}

/// Sorts by (slot, key) and keeps one entry per key, a write if any access wrote; the
/// kept entries are moved to the front and their number returned.
#[inline]
fn normalize(set: &mut [Access]) -> usize {
    // Tasks log a handful of accesses: insertion sort beats the general sort there.
    if set.len() <= 16 {
        for i in 1..set.len() {
            let x = set[i];
            let mut j = i;
            while j > 0 && set[j - 1] > x {
                set[j] = set[j - 1];
                j -= 1;
            }
            set[j] = x;
        }
    } else {
        set.sort_unstable();
    }
    // Entries of one key are adjacent, the write (flag 1) last: keep the last of each run.
    let mut out = 0;
    for i in 0..set.len() {
        let last_of_run = i + 1 == set.len() || set[i + 1].0 >> 1 != set[i].0 >> 1;
        if last_of_run {
            set[out] = set[i];
            out += 1;
        }
    }
    out
}

/// Room for the log of a chunk of tasks, its memory mapped beforehand (so another thread
/// can make it while a recorded run works on the previous chunk). `LogRoom::new(0, 0)` is
/// an empty log that grows as needed.
pub(crate) struct LogRoom(Segment);

impl LogRoom {
    /// Room for `tasks` tasks of about `per_task` accesses each.
    pub(crate) fn new(tasks: usize, per_task: usize) -> Self {
        LogRoom(Segment::with_room(tasks, tasks.saturating_mul(per_task)))
    }
}

/// A recorder whose views write the tables in place (made by `Recorder::in_place`), as the
/// recorded first call's body version sees it. Views bound through it are
/// `RecordVectorView<_, _, ToTables>`: with no scratch copy to look in, an access is the
/// table's element plus its log check, which keeps a recorded run near the serial body's
/// cost (a body version for both would carry the scratch path into every access).
pub struct InPlace<'r>(&'r Recorder);

impl<'r> InPlace<'r> {
    /// The in-place recorder `rec`, which must be made by [`Recorder::in_place`].
    pub(crate) fn new(rec: &'r Recorder) -> Self {
        assert!(
            rec.writes_in_place(),
            "strads-ap internal error: an in-place body version given a scratch recorder"
        );
        InPlace(rec)
    }
}

/// Where a recording body's writes go: [`ToScratch`] (reconnaissance: the tables stay
/// as they are) or [`ToTables`] (a recorded run: the call itself).
#[doc(hidden)]
pub trait Writes {
    /// Whether writes go to the tables.
    const IN_PLACE: bool;
}

/// Writes go to per-task scratch copies (reconnaissance).
#[doc(hidden)]
pub enum ToScratch {}

/// Writes go to the tables (a recorded run).
#[doc(hidden)]
pub enum ToTables {}

impl Writes for ToScratch {
    const IN_PLACE: bool = false;
}

impl Writes for ToTables {
    const IN_PLACE: bool = true;
}

/// What a recording body version is given: a [`Recorder`] (reconnaissance) or an
/// [`InPlace`] one (a recorded run).
#[doc(hidden)]
pub trait Recording {
    /// Where the views' writes go.
    type Writes: Writes;
    /// The recorder the views log into.
    fn recorder(&self) -> &Recorder;
}

impl Recording for Recorder {
    type Writes = ToScratch;
    #[inline(always)]
    fn recorder(&self) -> &Recorder {
        self
    }
}

impl Recording for InPlace<'_> {
    type Writes = ToTables;
    #[inline(always)]
    fn recorder(&self) -> &Recorder {
        self.0
    }
}

/// The recorder a recording view logs into. One per worker thread during reconnaissance.
pub struct Recorder {
    /// Bumped at every task start; recording views drop their scratch when it changes.
    task_epoch: Cell<u64>,
    /// The loop index being recorded.
    index: Cell<usize>,
    log: RefCell<Segment>,
    /// Captured tables in slot order: id, first element, length, map key index.
    tables: Vec<(u64, *mut u8, usize, *const u8)>,
    /// Whether views write the tables themselves rather than scratch copies: a recorded
    /// run (one worker, tasks in loop order) that is also the call's real run.
    in_place: bool,
    /// Per table slot, the running task's last accesses logged through its view (see
    /// [`Logged`]).
    last: Box<[Logged]>,
    /// Room made for each task's accesses (see [`LOG_HEADROOM`]).
    headroom: Cell<usize>,
    /// A recorded run's task logged more accesses than its room held (this many): the log
    /// misses some and must not plan.
    overflowed: Cell<Option<usize>>,
    /// Per table slot, where only some elements are here (a planning call across ranks):
    /// the bitmap of those present, and a present element that stands in for absent ones.
    present: Vec<Option<Presence>>,
    /// Absent elements tasks read, as (slot, key): see [`Recorder::missed`].
    misses: RefCell<Vec<(usize, u64)>>,
    /// Per table slot, whether its accesses go unlogged (see [`Recorder::unlogged`]);
    /// empty when every slot's are logged.
    unlogged: Vec<bool>,
}

/// Which elements of a table reconnaissance may read (see [`Recorder::with_presence`]).
#[derive(Clone, Copy)]
pub(crate) struct Presence {
    /// A bitmap over the table's keys, bit `k % 64` of word `k / 64` set where element `k`
    /// holds its value.
    pub bits: *const u64,
    /// An element that holds its value, read in place of an absent one so that the task
    /// goes on (and meets its other absent elements in the same pass); `None` where there
    /// is none (the task then stops at its first absent element).
    pub stand_in: Option<usize>,
}

impl Presence {
    /// Whether element `key` holds its value.
    #[inline(always)]
    pub(crate) fn has(&self, key: usize) -> bool {
        // SAFETY: the bitmap covers every key of the table (see `Recorder::with_presence`)
        // and views check `key` against the length first.
        let word = unsafe { *self.bits.add(key / 64) };
        word & (1 << (key % 64)) != 0
    }
}

// SAFETY: a `Presence` is a pointer to a bitmap that nothing writes while recorders read
// it (the engine changes bitmaps only between reconnaissance passes, when no worker runs).
unsafe impl Send for Presence {}
// SAFETY: as above.
unsafe impl Sync for Presence {}

/// A task stopped at an element that is not here (see [`Presence::stand_in`]).
pub(crate) struct Absent;

/// The elements the running task logged through a view, as `key << 1 | written` with
/// where in the log each entry is, so that a body that touches a row many times (`p[u][f]`
/// for every `f`, or a factorisation machine's dozen rows, read in one loop and updated
/// in the next) logs each element once, and a write after a read turns the read's entry
/// into a write instead of adding one. A factorisation machine's tasks so log ~36
/// entries instead of ~100 (its sixteen rows of two tables, each read, read again and
/// written, overflowed the four ways an earlier version kept), which the recorded run's
/// helper then sorts.
///
/// Open addressing on the key, at most half full: past [`Logged::REMEMBERED`] elements a
/// task's further new elements are logged each time they are met (the log is settled,
/// sorted and deduplicated, later anyway). Entries of earlier tasks are told apart by
/// their task number, so starting a task clears nothing. The access checked last is kept
/// apart (`last`): an inner loop over one row costs a load and a compare per access.
pub(crate) struct Logged {
    last: Cell<u64>,
    /// A fixed length, so that indexing it needs no bounds check.
    seen: Box<[Cell<Seen>; Logged::SLOTS]>,
    /// The running task's number (entries of other numbers are free).
    task: Cell<u64>,
    remembered: Cell<usize>,
}

/// An element a task logged: its mark, the task's number and the entry's position.
#[derive(Clone, Copy)]
struct Seen {
    mark: u64,
    task: u64,
    at: u32,
}

/// What a view does with an access (see [`Logged::check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// The task logged it already (as written, or both are reads).
    Known,
    /// A new element: log it, and tell [`Logged::logged_at`] where its entry went
    /// (`NOT_REMEMBERED`: nowhere to tell).
    New(u32),
    /// Read before, written now: the read's entry at this position becomes a write.
    Upgrade(u32),
}

/// [`Check::New`] for an element past what a task remembers.
pub(crate) const NOT_REMEMBERED: u32 = u32::MAX;

/// A position for an entry that was not kept (its task's room was full; see
/// [`Recorder::log`]).
pub(crate) const NOT_KEPT: u32 = u32::MAX;

impl Logged {
    /// Entries in the table of a view's logged elements (a power of two).
    const SLOTS: usize = 64;
    /// Distinct elements remembered per view and task: the table at most half full.
    pub(crate) const REMEMBERED: usize = Self::SLOTS / 2;

    fn new() -> Self {
        let free = Seen {
            mark: NOT_LOGGED,
            task: 0,
            at: NOT_KEPT,
        };
        Logged {
            last: Cell::new(NOT_LOGGED),
            seen: Box::new(std::array::from_fn(|_| Cell::new(free))),
            // Entries are made with task 0: free for every task from 1 on.
            task: Cell::new(1),
            remembered: Cell::new(0),
        }
    }

    fn clear(&self) {
        self.last.set(NOT_LOGGED);
        self.task.set(self.task.get() + 1);
        self.remembered.set(0);
    }

    /// What an access `mark` (`key << 1 | written`) of the running task needs: nothing
    /// when the task logged the same element already, as written or (for a read) as
    /// read; a new entry; or the upgrade of its read's entry to a write.
    #[inline(always)]
    pub(crate) fn check(&self, mark: u64) -> Check {
        // `last` is a logged mark: the same access, or a read of an element logged as
        // written, needs nothing more. (`NOT_LOGGED` matches no mark: no key is as large.)
        let last = self.last.get();
        if mark == last || mark | 1 == last {
            return Check::Known;
        }
        self.look_up(mark)
    }

    /// [`check`](Logged::check) past the last access: the table.
    #[inline(always)]
    fn look_up(&self, mark: u64) -> Check {
        let task = self.task.get();
        let mask = Self::SLOTS - 1;
        // Fibonacci hashing of the key: the top bits of its product.
        let mut i = ((mark >> 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize & mask;
        loop {
            let e = self.seen[i].get();
            if e.task != task {
                break;
            }
            if e.mark | 1 == mark | 1 {
                if e.mark & 1 >= mark & 1 {
                    self.last.set(e.mark);
                    return Check::Known;
                }
                self.seen[i].set(Seen { mark, ..e });
                self.last.set(mark);
                return Check::Upgrade(e.at);
            }
            i = (i + 1) & mask;
        }
        self.last.set(mark);
        let remembered = self.remembered.get();
        if remembered == Self::REMEMBERED {
            return Check::New(NOT_REMEMBERED);
        }
        self.remembered.set(remembered + 1);
        self.seen[i].set(Seen {
            mark,
            task,
            at: NOT_KEPT,
        });
        Check::New(i as u32)
    }

    /// The entry of the element [`Check::New`] answered `new` for is at `at` in the log.
    #[inline(always)]
    pub(crate) fn logged_at(&self, new: u32, at: u32) {
        if let Some(e) = self.seen.get(new as usize) {
            e.set(Seen { at, ..e.get() });
        }
    }
}

/// No access logged yet in the running task (see `Recorder::last`); no key is this large.
pub(crate) const NOT_LOGGED: u64 = u64::MAX;

impl Recorder {
    /// A recorder for a loop whose captured tables are these (id, data, length, map key
    /// index), in slot order, logging into `room`. The data must stay valid and unwritten
    /// while the recorder is used: views write to scratch copies.
    pub(crate) fn new(tables: Vec<(u64, *mut u8, usize, *const u8)>, room: LogRoom) -> Self {
        let headroom = LOG_HEADROOM.load(Ordering::Relaxed);
        let mut log = room.0;
        log.entries.reserve(headroom);
        Recorder {
            task_epoch: Cell::new(0),
            index: Cell::new(0),
            log: RefCell::new(log),
            last: (0..tables.len()).map(|_| Logged::new()).collect(),
            tables,
            in_place: false,
            headroom: Cell::new(headroom),
            overflowed: Cell::new(None),
            present: Vec::new(),
            misses: RefCell::new(Vec::new()),
            unlogged: Vec::new(),
        }
    }

    /// A recorder whose views log no access to the table slots marked in `unlogged`: the
    /// relaxed tables of a recorded run, which the plan leaves out and never checks. (A
    /// new user's SVD++ logged every `y[j][f]` of its relaxed implicit factors, a hundred
    /// rows a rating: its first call took 6-7 serial epochs.)
    pub(crate) fn unlogged(mut self, unlogged: Vec<bool>) -> Self {
        self.unlogged = unlogged;
        self
    }

    /// Whether views of table slot `slot` log their accesses.
    pub(crate) fn logs(&self, slot: usize) -> bool {
        !self.unlogged.get(slot).copied().unwrap_or(false)
    }

    /// A recorder whose views read only the present elements of some tables (`present`, in
    /// slot order; `None` where every element is here): a read of an absent one is noted
    /// (see [`Recorder::take_misses`]) and answered with a stand-in. Each bitmap must cover
    /// its table's keys and stay unwritten while the recorder is used.
    pub(crate) fn with_presence(mut self, present: Vec<Option<Presence>>) -> Self {
        self.present = present;
        self
    }

    /// Which elements of table slot `slot` views may read: `None` for every one.
    pub(crate) fn presence(&self, slot: usize) -> Option<Presence> {
        self.present.get(slot).copied().flatten()
    }

    /// The running task read element `key` of slot `slot`, which is not here: noted; returns
    /// the element to read instead, or stops the task (unwinding with [`Absent`]) where
    /// there is none.
    #[cold]
    #[inline(never)]
    pub(crate) fn missed(&self, slot: usize, key: usize) -> usize {
        self.misses.borrow_mut().push((slot, key as u64));
        match self.presence(slot).and_then(|p| p.stand_in) {
            Some(i) => i,
            None => std::panic::resume_unwind(Box::new(Absent)),
        }
    }

    /// The absent elements read since the last call, as (slot, key).
    pub(crate) fn take_misses(&self) -> Vec<(usize, u64)> {
        std::mem::take(&mut *self.misses.borrow_mut())
    }

    /// A recorder whose views write the tables in place: the recorded run is the call
    /// itself. The data must stay valid, and be read and written by this recorder's
    /// views alone (on one thread), while the recorder is used.
    pub(crate) fn in_place(tables: Vec<(u64, *mut u8, usize, *const u8)>, room: LogRoom) -> Self {
        Recorder {
            in_place: true,
            ..Recorder::new(tables, room)
        }
    }

    /// Whether views write the tables in place (see [`Recorder::in_place`]).
    #[inline(always)]
    pub(crate) fn writes_in_place(&self) -> bool {
        self.in_place
    }

    /// The last accesses logged through the view of table slot `slot` in the running task
    /// (see [`Logged`]).
    pub(crate) fn last_logged(&self, slot: usize) -> &Logged {
        &self.last[slot]
    }

    /// The slot, data, length and map key index of a table.
    pub(crate) fn table(&self, id: u64) -> (usize, *mut u8, usize, *const u8) {
        let slot = self
            .tables
            .iter()
            .position(|t| t.0 == id)
            .unwrap_or_else(|| panic!("strads-ap internal error: table {id} not registered"));
        let t = self.tables[slot];
        (slot, t.1, t.2, t.3)
    }

    /// Logs an access of the running task: into the room made at its start, with no call
    /// (see [`LOG_HEADROOM`]); past that room it is only counted, and
    /// [`end_task`](Recorder::end_task) deals with the task.
    /// Returns where the entry went, or [`NOT_KEPT`].
    #[inline(always)]
    pub(crate) fn log(&self, slot: usize, key: u64, write: bool) -> u32 {
        let mut log = self.log.borrow_mut();
        let at = log.entries.len();
        if at < log.entries.capacity() {
            log.entries.push(Access::new(slot, key, write));
            // A segment holds fewer than 2^32 entries (see `push_offset`).
            at as u32
        } else {
            log.lost += 1;
            NOT_KEPT
        }
    }

    /// Logs an access of the running task through the view of table slot `slot`, whose
    /// logged elements are `logged` (see [`Logged`]), unless the task logged it already.
    #[inline(always)]
    pub(crate) fn note(&self, logged: &Logged, slot: usize, key: u64, write: bool) {
        match logged.check((key << 1) | u64::from(write)) {
            Check::Known => {}
            Check::New(new) => logged.logged_at(new, self.log(slot, key, write)),
            Check::Upgrade(at) => self.upgrade(at),
        }
    }

    /// Turns the running task's entry at `at` (a read, logged by [`log`](Recorder::log))
    /// into a write. An entry that was not kept stays lost (its task is run or recorded
    /// again: see [`end_task`](Recorder::end_task)).
    #[inline(always)]
    pub(crate) fn upgrade(&self, at: u32) {
        let mut log = self.log.borrow_mut();
        if let Some(e) = log.entries.get_mut(at as usize) {
            e.0 |= 1;
        }
    }

    /// Whether a task of this recorded run logged more accesses than its room held, and
    /// how many it needed: its log misses some (see [`Recorder::end_task`]).
    pub(crate) fn overflowed(&self) -> Option<usize> {
        self.overflowed.get()
    }

    /// The current task's number, for views' scratch.
    #[inline]
    pub(crate) fn task_epoch(&self) -> u64 {
        self.task_epoch.get()
    }

    /// The loop index being recorded.
    pub(crate) fn index(&self) -> usize {
        self.index.get()
    }

    /// Starts recording the task of loop index `index`.
    #[inline]
    pub(crate) fn start_task(&self, index: usize) {
        self.log.borrow_mut().entries.reserve(self.headroom.get());
        self.task_epoch.set(self.task_epoch.get() + 1);
        self.index.set(index);
        for last in self.last.iter() {
            last.clear();
        }
    }

    /// Closes the current task's set. A task that logged more accesses than its room held
    /// makes more room for later tasks; in reconnaissance its accesses are dropped and it
    /// must run again ([`Ended::Again`]); in a recorded run, which cannot run a task twice,
    /// its partial set is kept and the log marked [`overflowed`](Recorder::overflowed).
    #[inline]
    pub(crate) fn end_task(&self) -> Ended {
        let mut log = self.log.borrow_mut();
        if log.lost > 0 {
            let needed = log.entries.len() - log.open_start() + std::mem::take(&mut log.lost);
            self.headroom.set(grow_headroom(needed));
            if !self.in_place {
                log.abort_task();
                return Ended::Again;
            }
            self.overflowed
                .set(Some(self.overflowed.get().unwrap_or(0).max(needed)));
        }
        if self.in_place {
            // A recorded run: settled later by a helper (see `AccessLog::settle`).
            log.push_offset();
        } else {
            log.close_task();
        }
        Ended::Logged
    }

    /// Drops the accesses of a task that failed.
    pub(crate) fn abort_task(&self) {
        self.log.borrow_mut().abort_task();
    }

    /// The log recorded. A recorder [`in place`](Recorder::in_place) leaves its tasks
    /// unsettled: call [`AccessLog::settle`] before reading it.
    pub(crate) fn into_log(self) -> AccessLog {
        AccessLog::single(self.log.into_inner())
    }
}

/// The loop indices a recording body runs: each step closes the previous task's log.
pub struct RecordIndices<'a, I> {
    range: Range<usize>,
    rec: &'a Recorder,
    open: bool,
    _index: PhantomData<I>,
}

impl<'a, I> RecordIndices<'a, I> {
    pub(crate) fn new(range: Range<usize>, rec: &'a Recorder) -> Self {
        RecordIndices {
            range,
            rec,
            open: false,
            _index: PhantomData,
        }
    }
}

impl<I: LoopIndex> Iterator for RecordIndices<'_, I> {
    type Item = I;

    #[inline]
    fn next(&mut self) -> Option<I> {
        if self.open && self.rec.end_task() == Ended::Again {
            // Reconnaissance of a task that logged more than its room held: again, with
            // more room.
            let i = self.rec.index();
            self.rec.start_task(i);
            return Some(I::from_usize(i));
        }
        self.open = false;
        let i = self.range.next()?;
        self.rec.start_task(i);
        self.open = true;
        Some(I::from_usize(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_packs_and_unpacks() {
        let a = Access::new(3, 12345, true);
        assert_eq!((a.slot(), a.key(), a.write()), (3, 12345, true));
        let b = Access::new(254, KEY_MASK, false);
        assert_eq!((b.slot(), b.key(), b.write()), (254, KEY_MASK, false));
    }

    /// Logs one more access than the running task's room holds, all distinct.
    fn overfill(rec: &Recorder) -> usize {
        let room = {
            let log = rec.log.borrow();
            log.entries.capacity() - log.entries.len()
        };
        for key in 0..=room as u64 {
            rec.log(0, key, false);
        }
        room + 1
    }

    #[test]
    fn a_reconnoitred_task_past_its_room_runs_again_with_more() {
        let tables = vec![(10, std::ptr::null_mut(), 0, std::ptr::null())];
        let rec = Recorder::new(tables, LogRoom::new(0, 0));
        let mut indices = RecordIndices::<usize>::new(7..9, &rec);
        assert_eq!(indices.next(), Some(7));
        rec.log(0, 1, true);
        assert_eq!(indices.next(), Some(8));
        let needed = overfill(&rec);
        // Task 8 logged past its room: nothing of it is kept, and it runs again.
        assert_eq!(indices.next(), Some(8));
        assert_eq!(rec.index(), 8);
        assert!(rec.headroom.get() >= 2 * needed, "the room grew");
        assert!(LOG_HEADROOM.load(Ordering::Relaxed) >= 2 * needed);
        for key in 0..needed as u64 {
            rec.log(0, key, false);
        }
        assert_eq!(indices.next(), None);
        assert_eq!(
            rec.overflowed(),
            None,
            "reconnaissance runs a task again instead"
        );
        let log = rec.into_log();
        assert_eq!(log.tasks(), 2);
        assert_eq!(log.task(0), &[Access::new(0, 1, true)]);
        assert_eq!(log.task(1).len(), needed, "the second run's log, whole");
    }

    #[test]
    fn a_recorded_task_past_its_room_marks_the_log_overflowed() {
        let tables = vec![(10, std::ptr::null_mut(), 0, std::ptr::null())];
        let rec = Recorder::in_place(tables, LogRoom::new(0, 0));
        let mut indices = RecordIndices::<usize>::new(0..2, &rec);
        assert_eq!(indices.next(), Some(0));
        let needed = overfill(&rec);
        // A recorded task wrote the tables: it does not run again.
        assert_eq!(indices.next(), Some(1));
        rec.log(0, 3, true);
        assert_eq!(indices.next(), None);
        assert_eq!(rec.overflowed(), Some(needed));
        assert!(rec.headroom.get() >= 2 * needed, "later tasks get the room");
    }

    #[test]
    fn a_task_log_is_deduplicated_and_writes_win() {
        let rec = Recorder::new(
            vec![
                (10, std::ptr::null_mut(), 0, std::ptr::null()),
                (11, std::ptr::null_mut(), 0, std::ptr::null()),
            ],
            LogRoom::new(0, 0),
        );
        rec.log(0, 5, false);
        rec.log(0, 5, true);
        rec.log(0, 5, false);
        rec.log(1, 2, false);
        rec.log(0, 1, false);
        rec.end_task();
        rec.log(1, 2, true);
        rec.end_task();
        let log = rec.into_log();
        assert_eq!(log.tasks(), 2);
        assert_eq!(
            log.task(0),
            &[
                Access::new(0, 1, false),
                Access::new(0, 5, true),
                Access::new(1, 2, false)
            ]
        );
        assert_eq!(log.task(1), &[Access::new(1, 2, true)]);
    }

    #[test]
    fn a_recorded_runs_log_settled_later_equals_one_settled_per_task() {
        let tables = || {
            vec![
                (10, std::ptr::null_mut(), 0, std::ptr::null()),
                (11, std::ptr::null_mut(), 0, std::ptr::null()),
            ]
        };
        let tasks: [&[(usize, u64, bool)]; 4] = [
            &[(1, 7, false), (0, 5, true), (0, 5, false), (0, 2, false)],
            &[],
            &[(0, 1, false), (1, 3, true)],
            &[(1, 9, false), (1, 9, true), (1, 9, true)],
        ];
        let now = Recorder::new(tables(), LogRoom::new(0, 0));
        let later = Recorder::in_place(tables(), LogRoom::new(4, 2));
        for rec in [&now, &later] {
            for task in tasks {
                for &(slot, key, write) in task {
                    rec.log(slot, key, write);
                }
                rec.end_task();
            }
        }
        let (now, mut later) = (now.into_log(), later.into_log());
        assert_ne!(later, now, "not settled yet");
        later.settle();
        assert_eq!(later, now);
        assert_eq!(later.task(0).len(), 3);
        assert_eq!(later.task(3), &[Access::new(1, 9, true)]);
        assert!(later.writes(0) && later.writes(1));
        let settled = later.clone();
        later.settle();
        assert_eq!(later, settled, "settling twice changes nothing");
    }

    #[test]
    fn a_task_logs_each_element_once_and_a_write_after_a_read_upgrades_its_entry() {
        let rec = Recorder::in_place(
            vec![(10, std::ptr::null_mut(), 0, std::ptr::null())],
            LogRoom::new(2, 64),
        );
        let logged = rec.last_logged(0);
        // A factorisation machine's pattern: rows read in one loop, read again and
        // written in the next; more rows than a handful, in no order.
        let rows: Vec<u64> = (0..20).map(|r| (r * 7) % 20).collect();
        for task in 0..2 {
            rec.start_task(task);
            for &r in &rows {
                rec.note(logged, 0, r, false);
            }
            for &r in &rows {
                rec.note(logged, 0, r, false);
                rec.note(logged, 0, r, true);
            }
            rec.end_task();
        }
        let mut log = rec.into_log();
        let wrote = |r: u64| Access::new(0, r, true);
        for task in 0..2 {
            // Before settling: one entry per row, in first-touch order, each a write.
            let raw: Vec<Access> = rows.iter().map(|&r| wrote(r)).collect();
            assert_eq!(log.task(task), &raw[..], "task {task}");
        }
        log.settle();
        let sorted: Vec<Access> = (0..20).map(wrote).collect();
        assert_eq!(log.task(1), &sorted[..]);
        // Past what a task remembers, new elements are logged each time they are met;
        // settling still leaves one entry each.
        let rec = Recorder::new(
            vec![(10, std::ptr::null_mut(), 0, std::ptr::null())],
            LogRoom::new(0, 0),
        );
        let logged = rec.last_logged(0);
        let many = Logged::REMEMBERED as u64 + 8;
        rec.start_task(0);
        for _ in 0..2 {
            for r in 0..many {
                rec.note(logged, 0, r, r % 2 == 0);
            }
        }
        rec.end_task();
        let log = rec.into_log();
        let settled: Vec<Access> = (0..many).map(|r| Access::new(0, r, r % 2 == 0)).collect();
        assert_eq!(log.task(0), &settled[..]);
    }

    #[test]
    fn ranges_walk_segments_in_order() {
        let chunk = |base: u64, n: u64| {
            AccessLog::from_tasks((0..n).map(|t| vec![Access::new(1, base + t, false)]))
        };
        let log = AccessLog::from_chunks(3, vec![chunk(0, 8), chunk(8, 8), chunk(16, 5)]);
        for (a, b) in [
            (0, 21),
            (3, 19),
            (8, 16),
            (7, 9),
            (20, 21),
            (5, 5),
            (0, 100),
        ] {
            let mut got = Vec::new();
            log.for_each_in(a..b, |t, acc| {
                assert_eq!(acc, &[Access::new(1, t as u64, false)]);
                got.push(t);
            });
            assert_eq!(got, (a..b.min(21)).collect::<Vec<_>>(), "{a}..{b}");
        }
        AccessLog::new().for_each_in(0..5, |_, _| panic!("no tasks"));
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one part's share of the loop indices
    fn logs_travel_as_bytes_and_bad_bytes_are_refused() {
        // Loop indices 10.. : task 10 reads its own index (slot 0, key 10) and writes
        // element 2 of slot 1; task 11 logs nothing; task 12 (the second part) writes a
        // key far beyond a byte.
        let a = AccessLog::from_tasks([
            vec![Access::new(0, 10, false), Access::new(1, 2, true)],
            vec![],
        ]);
        let b = AccessLog::from_tasks([vec![
            Access::new(0, 11, false),
            Access::new(1, (1 << 40) + 7, true),
        ]]);
        let spaces = [20, 1 << 41];
        let both = [10..12, 12..13];
        let joined = AccessLog::from_byte_parts(
            &[a.to_bytes(10), b.to_bytes(12)],
            &LogShape::new(&spaces, &both),
        )
        .unwrap();
        let mut whole = a.clone();
        whole.append(b.clone());
        assert_eq!(joined.tasks(), 3);
        for t in 0..3 {
            assert_eq!(joined.task(t), whole.task(t));
        }
        for slot in 0..2 {
            assert_eq!(joined.writes(slot), whole.writes(slot), "slot {slot}");
        }
        assert!(!joined.writes(0) && joined.writes(1));
        // The own-index read travels as one byte plus its header byte.
        let good = a.to_bytes(10);
        assert_eq!(good.len(), 24 + (1 + 1 + 2) + 1);

        let first = [10..12];
        let err = |parts: &[Vec<u8>], key_spaces: &[usize]| {
            let shares = if parts.len() == 1 {
                &first[..]
            } else {
                &both[..]
            };
            let bad =
                AccessLog::from_byte_parts(parts, &LogShape::new(key_spaces, shares)).unwrap_err();
            bad.to_string()
        };
        let one = std::slice::from_ref(&good);
        assert!(err(one, &spaces[..1]).contains("table slot 1, but the loop has 1"));
        assert!(err(&[good[..good.len() - 1].to_vec()], &spaces).contains("ends early"));
        assert!(err(&[good[..20].to_vec()], &spaces).contains("ends early"));
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(err(&[trailing], &spaces).contains("1 trailing bytes"));
        // Parts that are not the senders' shares of the tasks; a part missing.
        let e = err(&[good.clone(), b.to_bytes(13)], &spaces);
        assert!(e.starts_with("access log part 1: it holds 1 tasks from loop index 13; this rank's share is 1 tasks from 12"), "{e}");
        let e = AccessLog::from_byte_parts(one, &LogShape::new(&spaces, &both)).unwrap_err();
        assert!(
            e.to_string().contains("1 access log parts for 2 shares"),
            "{e}"
        );
        // Keys past their table, whether sent or implied by the loop index.
        let e = err(&[good.clone(), b.to_bytes(12)], &[20, 1 << 40]);
        assert_eq!(
            e,
            format!(
                "access log part 1: task 0 (loop index 12): key {} of table slot 1, which \
                 has {} keys",
                (1u64 << 40) + 7,
                1u64 << 40
            )
        );
        assert!(err(one, &[10, 3]).contains("key 10 of table slot 0, which has 10 keys"));
        // Another format version.
        let mut old = good.clone();
        old[..8].copy_from_slice(&1u64.to_le_bytes());
        assert!(err(&[old], &spaces).contains("format 1"));
        // A task count far beyond the bytes is refused, not allocated.
        let mut huge = good.clone();
        huge[16..24].copy_from_slice(&(usize::MAX as u64 - 10).to_le_bytes());
        let shares = [10..usize::MAX];
        let e = AccessLog::from_byte_parts(&[huge], &LogShape::new(&spaces, &shares)).unwrap_err();
        assert!(e.message.contains("ends early"), "{e}");
        // A varint that never ends.
        let mut endless = good[..24].to_vec();
        endless[16..24].copy_from_slice(&1u64.to_le_bytes());
        endless.extend_from_slice(&[0xff; 12]);
        let shares = [10..11];
        let e =
            AccessLog::from_byte_parts(&[endless], &LogShape::new(&spaces, &shares)).unwrap_err();
        assert!(e.message.contains("ends early"), "{e}");
        // Two accesses of one element in a set: not a normalised log.
        let mut twice = Vec::new();
        for w in [LOG_FORMAT, 0, 1] {
            twice.extend_from_slice(&w.to_le_bytes());
        }
        // Two accesses: (slot 0, key 3, read), then (slot 0, key 3, write).
        twice.extend_from_slice(&[2, 0, 3, 1, 3]);
        let shares = [0..1];
        let e = AccessLog::from_byte_parts(&[twice], &LogShape::new(&[5], &shares)).unwrap_err();
        assert!(e.message.contains("not sorted"), "{e}");
    }

    #[test]
    fn varints_round_trip_at_their_edges() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX >> 1,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut at = 0;
            assert_eq!(get_varint(&out, &mut at), Some(v), "{v}");
            assert_eq!(at, out.len());
        }
        // Eleven bytes, or a tenth byte with more than the 64th bit: refused.
        let mut at = 0;
        assert_eq!(get_varint(&[0x80; 11], &mut at), None);
        let mut at = 0;
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert_eq!(get_varint(&over, &mut at), None);
    }

    #[test]
    fn chunk_logs_join_without_copies() {
        let chunk = |base: u64, n: u64| {
            AccessLog::from_tasks((0..n).map(|t| vec![Access::new(0, base + t, t % 2 == 0)]))
        };
        let log = AccessLog::from_chunks(2, vec![chunk(0, 4), chunk(4, 4), chunk(8, 3)]);
        assert_eq!(log.tasks(), 11);
        assert_eq!(log.entries(), 11);
        for t in 0..11 {
            assert_eq!(log.task(t), &[Access::new(0, t as u64, t % 2 == 0)]);
        }
    }

    #[test]
    fn logs_append_in_task_order() {
        let mut a = AccessLog::from_tasks([vec![Access::new(0, 1, true)]]);
        let b = AccessLog::from_tasks([vec![Access::new(0, 2, false)], vec![]]);
        a.append(b);
        assert_eq!(a.tasks(), 3);
        assert_eq!(a.task(1), &[Access::new(0, 2, false)]);
        assert!(a.task(2).is_empty());
    }

    proptest::proptest! {
        /// A view's table of logged elements answers as a plain per-task set does: a
        /// new element is logged, a write after reads upgrades the read's entry (the
        /// position it was told), anything else needs nothing; past `REMEMBERED`
        /// elements, new ones are logged each time. Tasks start afresh.
        #[test]
        fn logged_elements_answer_as_a_set_of_the_task_does(
            tasks in proptest::collection::vec(
                proptest::collection::vec((0u64..48, proptest::bool::ANY), 0..120),
                1..4,
            )
        ) {
            use std::collections::HashMap;
            let logged = Logged::new();
            for accesses in tasks {
                logged.clear();
                // Key -> (written, position told).
                let mut set: HashMap<u64, (bool, u32)> = HashMap::new();
                // The last access logged or found (a read of an element written counts as
                // the write): covers one more, remembered or not.
                let mut last = NOT_LOGGED;
                for (n, (key, write)) in accesses.into_iter().enumerate() {
                    let mark = (key << 1) | u64::from(write);
                    let got = logged.check(mark);
                    if mark == last || mark | 1 == last {
                        proptest::prop_assert_eq!(got, Check::Known, "key {} write {}", key, write);
                        continue;
                    }
                    last = mark;
                    match set.get_mut(&key) {
                        Some((w, _)) if *w || !write => {
                            proptest::prop_assert_eq!(got, Check::Known, "key {} write {}", key, write);
                            last = (key << 1) | u64::from(*w);
                        }
                        Some((w, at)) => {
                            proptest::prop_assert_eq!(got, Check::Upgrade(*at), "key {}", key);
                            *w = true;
                        }
                        None => {
                            let Check::New(new) = got else {
                                return Err(proptest::test_runner::TestCaseError::fail(
                                    format!("key {key}: {got:?} for a new element"),
                                ));
                            };
                            if set.len() < Logged::REMEMBERED {
                                proptest::prop_assert_ne!(new, NOT_REMEMBERED);
                                logged.logged_at(new, n as u32);
                                set.insert(key, (write, n as u32));
                            } else {
                                proptest::prop_assert_eq!(new, NOT_REMEMBERED);
                            }
                        }
                    }
                }
            }
        }
    }
}
