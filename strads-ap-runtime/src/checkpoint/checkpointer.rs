//! A rank's checkpointing state: the loop calls so far, the tables changed since the last
//! checkpoint, the checkpoint being written and its commit, and in recovery the replay.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::agree::{self, Committed};
use super::format::{self, InputRecord, Manifest, META};
use super::writer::{self, ManifestWriter, SyncPolicy, Writer};
use super::{fault, CheckpointConfig};
use crate::cluster::collective::Comm;
use crate::dds::persist::Input;
use crate::dds::table::{lookup_handle, TableHandle};
use crate::error::{Error, Result};

/// An input DDS being written in the background.
struct InputJob {
    number: u64,
    record: InputRecord,
    job: Writer,
}

/// A checkpoint being written in the background.
struct Pending {
    seq: u64,
    site: String,
    /// Tables it holds.
    ids: Vec<u64>,
    /// The writer: this rank's file checksum.
    job: Writer,
    /// Input DDSs made before this loop call, committed with it.
    inputs: Vec<InputJob>,
    /// Whether its files are forced to disk.
    synced: bool,
}

/// What a loop call should do.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// Run it (and checkpoint after it if due).
    Run,
    /// Skip it: recovery replays past it (its state, if any, was loaded).
    Skip,
}

/// A rank's checkpointing state.
pub(super) struct Checkpointer {
    config: CheckpointConfig,
    /// Loop calls so far.
    seq: u64,
    /// Tables written since the last checkpoint.
    dirty: HashMap<u64, std::sync::Weak<dyn TableHandle>>,
    /// Every table checkpointed so far → the checkpoint holding its latest state.
    latest: BTreeMap<u64, u64>,
    /// Every checkpoint `latest` refers to → each rank's checksum of its file there.
    files: BTreeMap<u64, Vec<u32>>,
    /// Committed checkpoints of this run (or found at recovery), oldest first.
    committed: Vec<Committed>,
    /// Recovery: skip loop calls up to this sequence number.
    replay_until: Option<u64>,
    /// Recovery: valid manifests by sequence number.
    manifests: BTreeMap<u64, Manifest>,
    /// Recovery: which checkpoint each table's current state came from.
    loaded: BTreeMap<u64, u64>,
    /// Recovery has been prepared (the ranks agreed where to resume).
    prepared: bool,
    /// Whether the last loop call was skipped by a replay.
    pub last_replayed: bool,
    /// The reduction variables' values of every loop call so far that has any (see
    /// [`Manifest::reductions`]); at recovery, those of the calls a replay skips.
    journal: BTreeMap<u64, Vec<Vec<u8>>>,
    /// The values of the reduction variables of the loop call a replay skipped last.
    pub skipped_reductions: Option<Vec<Vec<u8>>>,
    /// Time spent writing checkpoints.
    pub spent: Duration,
    /// When checkpointing was configured (the start of a replay).
    started: Instant,
    /// The checkpoint being written, not committed yet.
    pending: Option<Pending>,
    /// Rank 0: the manifest being written, and its checkpoint.
    manifest_job: Option<(u64, ManifestWriter)>,
    /// Input operators so far.
    inputs: u64,
    /// Input DDSs being written, to be committed with the next loop checkpoint.
    input_jobs: Vec<InputJob>,
    /// Committed input DDSs.
    committed_inputs: BTreeMap<u64, InputRecord>,
    /// Recovery: the input DDSs to load rather than make.
    replay_inputs: BTreeMap<u64, InputRecord>,
    /// Recovery: input DDSs loaded so far.
    inputs_loaded: usize,
    /// Encoding buffers of the last checkpoint, for the next.
    buffers: Vec<Vec<u8>>,
    /// Which checkpoints are forced to disk.
    sync: SyncPolicy,
}

impl Checkpointer {
    pub fn new(config: CheckpointConfig) -> Self {
        let sync = SyncPolicy::new(config.sync_every);
        Checkpointer {
            config,
            seq: 0,
            dirty: HashMap::new(),
            latest: BTreeMap::new(),
            files: BTreeMap::new(),
            committed: Vec::new(),
            replay_until: None,
            manifests: BTreeMap::new(),
            loaded: BTreeMap::new(),
            prepared: false,
            last_replayed: false,
            journal: BTreeMap::new(),
            skipped_reductions: None,
            spent: Duration::ZERO,
            started: Instant::now(),
            pending: None,
            manifest_job: None,
            inputs: 0,
            input_jobs: Vec::new(),
            committed_inputs: BTreeMap::new(),
            replay_inputs: BTreeMap::new(),
            inputs_loaded: 0,
            buffers: Vec::new(),
            sync,
        }
    }

    /// Recovery: finds the newest checkpoint that every rank can load and agrees on it
    /// with the other ranks (a collective when `comm` is given).
    fn prepare(&mut self, comm: Option<&Comm>, rank: usize, world: usize) -> Result<()> {
        self.prepared = true;
        if !self.config.recover {
            return Ok(());
        }
        let root = self.config.dir.clone();
        let manifests = agree::loadable_everywhere(&root, comm, rank, world)?;
        let Some(&agreed) = manifests.keys().next_back() else {
            if rank == 0 {
                eprintln!(
                    "strads-ap: recovering, but {} holds no usable checkpoint: starting over",
                    root.display()
                );
            }
            return Ok(());
        };
        self.replay_until = Some(agreed);
        self.latest = manifests[&agreed].tables.clone();
        self.files = manifests[&agreed].files.clone();
        self.committed = manifests
            .iter()
            .map(|(&seq, m)| Committed {
                seq,
                tables: m.tables.clone(),
                synced: false,
                world: m.world,
            })
            .collect();
        let inputs = manifests[&agreed].inputs.clone();
        self.journal = manifests[&agreed].reductions.clone();
        self.manifests = manifests;
        self.replay_inputs = agree::loadable_inputs(&root, &inputs, comm, rank, world)?;
        self.committed_inputs = inputs;
        if rank == 0 {
            let newest = agree::found(&root)?.last().copied().unwrap_or(agreed);
            let fallback = match newest > agreed {
                true => format!(" (not from {newest}, the newest found: see the warnings above)"),
                false => String::new(),
            };
            let made_by = self.manifests[&agreed].world;
            let resized = match made_by == world {
                true => String::new(),
                false => format!(
                    "; it was made by {made_by} ranks, this job has {world}: each table is \
                     repartitioned as it loads"
                ),
            };
            eprintln!(
                "strads-ap: recovering: replaying up to loop call {agreed}{fallback} from {}{resized}",
                root.display()
            );
        }
        Ok(())
    }

    /// Called when an input operator starts.
    pub fn begin_input(
        &mut self,
        site: String,
        comm: Option<&Comm>,
        rank: usize,
        world: usize,
    ) -> Result<Input> {
        if !self.prepared {
            self.prepare(comm, rank, world)?;
        }
        self.inputs += 1;
        let number = self.inputs;
        let Some(record) = self.replay_inputs.remove(&number) else {
            return Ok(Input::Record { number, site });
        };
        if record.site != site {
            return Err(Error::Config(format!(
                "recovery: input operator {number} is {site}, but the checkpoint was made by \
                 {} (the program changed since; remove {} to start over)",
                record.site,
                self.config.dir.display()
            )));
        }
        let root = &self.config.dir;
        let path = |part, of| format::input_file(root, number, part, of);
        // Checked when the ranks agreed; checked again in case it changed since.
        let mut parts =
            format::Parts::read(&record.checksums, rank, world, path).map_err(Error::Config)?;
        let meta = parts.first(META).unwrap_or_default();
        let state = parts.take(record.id).ok_or_else(|| {
            Error::Config(format!(
                "{}: no state of DDS {}",
                format::input_file(root, number, rank, record.checksums.len()).display(),
                record.id
            ))
        })?;
        self.inputs_loaded += 1;
        Ok(Input::Load {
            id: record.id,
            state,
            meta,
        })
    }

    /// An input operator made `table` (with its extra outcome `meta`): writes it in the
    /// background, to be committed with the next loop checkpoint.
    pub fn made_input(
        &mut self,
        number: u64,
        site: String,
        table: Arc<dyn TableHandle>,
        meta: Vec<u8>,
        rank: usize,
        world: usize,
    ) -> Result<()> {
        let t0 = Instant::now();
        let id = table.id();
        let path = format::input_file(&self.config.dir, number, rank, world);
        // Written once, so forced to disk at once.
        let job = writer::spawn_writer(
            vec![table],
            vec![(META, meta)],
            Vec::new(),
            path,
            Some(vec![]),
        )?;
        self.input_jobs.push(InputJob {
            number,
            record: InputRecord {
                site,
                id,
                checksums: Vec::new(),
            },
            job,
        });
        self.spent += t0.elapsed();
        Ok(())
    }

    /// Called when a loop call starts: its sequence number, and whether to run it.
    pub fn enter(
        &mut self,
        site: &str,
        comm: Option<&Comm>,
        rank: usize,
        world: usize,
    ) -> Result<Entry> {
        if !self.prepared {
            self.prepare(comm, rank, world)?;
        }
        self.seq += 1;
        let seq = self.seq;
        self.last_replayed = false;
        self.skipped_reductions = None;
        if !self.config.recover {
            fault::at_loop_call(rank, seq);
        }
        let Some(until) = self.replay_until else {
            return Ok(Entry::Run);
        };
        if seq > until {
            self.replay_until = None;
            return Ok(Entry::Run);
        }
        if let Some(m) = self.manifests.get(&seq) {
            if m.site != site {
                return Err(Error::Config(format!(
                    "recovery: loop call {seq} is {site}, but the checkpoint was taken after \
                     {} (the program or its input changed since; remove {} to start over)",
                    m.site,
                    self.config.dir.display()
                )));
            }
            let (tables, files) = (m.tables.clone(), m.files.clone());
            self.load(&tables, &files, rank, world)?;
        }
        self.last_replayed = true;
        self.skipped_reductions = self.journal.get(&seq).cloned();
        if seq == until {
            self.replay_until = None;
            if rank == 0 {
                eprintln!(
                    "strads-ap: recovered the state after loop call {seq} ({site}) in {:.2} s \
                     of replay ({} DDSs of data operators loaded rather than made again)",
                    self.started.elapsed().as_secs_f64(),
                    self.inputs_loaded
                );
            }
        }
        Ok(Entry::Skip)
    }

    /// Loads every table whose state in `tables` differs from what is loaded, from files
    /// whose checksums are `files`'.
    fn load(
        &mut self,
        tables: &BTreeMap<u64, u64>,
        files: &BTreeMap<u64, Vec<u32>>,
        rank: usize,
        world: usize,
    ) -> Result<()> {
        let root = self.config.dir.clone();
        let mut by_file: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (&id, &f) in tables {
            if self.loaded.get(&id) != Some(&f) {
                by_file.entry(f).or_default().push(id);
            }
        }
        for (f, ids) in by_file {
            // Checked when the ranks agreed; checked again in case it changed since.
            let sums = files.get(&f).map_or(&[][..], Vec::as_slice);
            let path = |part, of| format::rank_file(&root, f, part, of);
            let mut parts = format::Parts::read(sums, rank, world, path).map_err(Error::Config)?;
            for id in ids {
                let state = parts.take(id).ok_or_else(|| {
                    Error::Config(format!(
                        "{}: no state of DDS {id}",
                        format::rank_file(&root, f, rank, sums.len()).display()
                    ))
                })?;
                let table = lookup_handle(id).ok_or_else(|| {
                    Error::Config(format!(
                        "recovery: DDS {id} of checkpoint {f} does not exist at this point of \
                         the replay (the program changed since the checkpoint?)"
                    ))
                })?;
                state.restore("recovery", &*table)?;
                self.loaded.insert(id, f);
            }
        }
        Ok(())
    }

    /// Notes that a driver operator changed `table` outside the loops: its state goes into
    /// the next checkpoint.
    pub fn note_modified(&mut self, table: &Arc<dyn TableHandle>) {
        self.dirty.insert(table.id(), Arc::downgrade(table));
    }

    /// Called when a loop call ran: notes the tables it wrote and checkpoints if due (in
    /// the background, committing the previous checkpoint first).
    pub fn leave(
        &mut self,
        site: &str,
        written: &[Arc<dyn TableHandle>],
        reductions: Vec<Vec<u8>>,
        comm: Option<&Comm>,
        rank: usize,
        world: usize,
    ) -> Result<()> {
        if !reductions.is_empty() {
            self.journal.insert(self.seq, reductions);
        }
        for t in written {
            self.dirty.insert(t.id(), Arc::downgrade(t));
        }
        if self.seq % self.config.every != 0 {
            return Ok(());
        }
        let t0 = Instant::now();
        self.commit_pending(comm, rank, world)?;
        let seq = self.seq;
        let mut tables: Vec<Arc<dyn TableHandle>> = self
            .dirty
            .drain()
            .filter_map(|(_, t)| t.upgrade())
            .collect();
        tables.sort_by_key(|t| t.id());
        // Writers wait until the writer has its copy; readers go on.
        let path = format::rank_file(&self.config.dir, seq, rank, world);
        let ids = tables.iter().map(|t| t.id()).collect();
        let buffers = std::mem::take(&mut self.buffers);
        let synced = self.sync.next();
        let sync = self.sync.start(&path, Instant::now());
        let job = writer::spawn_writer(tables, Vec::new(), buffers, path, sync)?;
        self.pending = Some(Pending {
            seq,
            site: site.to_string(),
            ids,
            job,
            inputs: std::mem::take(&mut self.input_jobs),
            synced,
        });
        self.spent += t0.elapsed();
        Ok(())
    }

    /// Commits the checkpoint being written, once every rank's file is durable (a
    /// collective when `comm` is given). Nothing to do when none is pending.
    pub fn commit_pending(&mut self, comm: Option<&Comm>, rank: usize, world: usize) -> Result<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let (mut mine, buffers) = writer::join_writer(p.job, &format!("checkpoint {}", p.seq));
        self.buffers = buffers;
        let mut made = Vec::with_capacity(p.inputs.len());
        let mut input_sums = Vec::with_capacity(p.inputs.len());
        for input in p.inputs {
            // Inputs are written once: their buffers are not kept.
            let (outcome, _) = writer::join_writer(input.job, &format!("input {}", input.number));
            match (&mine, outcome) {
                (Ok(_), Err(e)) => mine = Err(e),
                (_, Ok(sum)) => input_sums.push(sum),
                (Err(_), Err(_)) => {}
            }
            made.push((input.number, input.record));
        }
        // Rank 0 decides, for every rank, whether the next checkpoint is synced.
        let sync_next = self.sync.due(Instant::now());
        let mine = mine
            .map(|sum| (sum, sync_next, input_sums))
            .map_err(|e| Error::Config(format!("checkpoint: {e}")));
        let outcomes = match comm {
            Some(c) => c.gather_outcomes(mine)?,
            None => vec![mine?],
        };
        self.sync.decide(outcomes[0].1);
        for id in p.ids {
            self.latest.insert(id, p.seq);
        }
        // Each rank's checksum of every file the manifest refers to.
        self.files
            .insert(p.seq, outcomes.iter().map(|o| o.0).collect());
        let referred: std::collections::BTreeSet<u64> = self.latest.values().copied().collect();
        self.files.retain(|f, _| referred.contains(f));
        for (i, (number, mut record)) in made.into_iter().enumerate() {
            let sums: Option<Vec<u32>> = outcomes.iter().map(|o| o.2.get(i).copied()).collect();
            record.checksums = sums.ok_or_else(|| {
                Error::Config(format!(
                    "checkpoint {}: the ranks made different numbers of input DDSs",
                    p.seq
                ))
            })?;
            self.committed_inputs.insert(number, record);
        }
        let manifest = Manifest {
            seq: p.seq,
            site: p.site,
            world,
            tables: self.latest.clone(),
            files: self.files.clone(),
            inputs: self.committed_inputs.clone(),
            reductions: self
                .journal
                .range(..=p.seq)
                .map(|(seq, values)| (*seq, values.clone()))
                .collect(),
        };
        // Rank 0 commits by writing the manifest, in the background too: the previous
        // manifest is durable first, and a failure to write one fails the next commit.
        self.await_manifest(comm, rank, world)?;
        if rank == 0 {
            let path = format::manifest_file(&self.config.dir, p.seq);
            let job = writer::spawn_manifest_writer(path, manifest, p.synced)?;
            self.manifest_job = Some((p.seq, job));
        }
        self.committed.push(Committed {
            seq: p.seq,
            tables: self.latest.clone(),
            synced: p.synced,
            world,
        });
        Ok(())
    }

    /// Commits the checkpoint being written and waits until its manifest is durable.
    pub fn flush(&mut self, comm: Option<&Comm>, rank: usize, world: usize) -> Result<()> {
        self.commit_pending(comm, rank, world)?;
        // Input DDSs made after the last loop call have nothing to commit them (a replay
        // makes them again); their writers finish before the program ends.
        for input in self.input_jobs.drain(..) {
            let _ = input.job.join();
        }
        self.await_manifest(comm, rank, world)?;
        // The end of the job: everything on disk.
        let mut files = self.sync.take_unsynced();
        if rank == 0 {
            if let Some(last) = self.committed.last() {
                files.push(format::manifest_file(&self.config.dir, last.seq));
            }
        }
        writer::sync_files(&files).map_err(|e| Error::Config(format!("checkpoint: {e}")))?;
        if let Some(last) = self.committed.last_mut() {
            last.synced = true;
        }
        Ok(())
    }

    /// Waits until rank 0's manifest being written is durable (every rank learns whether
    /// it is), then prunes old checkpoints.
    fn await_manifest(&mut self, comm: Option<&Comm>, rank: usize, world: usize) -> Result<()> {
        agree::manifest_written(self.manifest_job.take(), comm)?;
        let pruned = agree::prune(&mut self.committed, self.config.keep);
        agree::delete(&self.config.dir, &pruned, rank, world);
        Ok(())
    }
}
