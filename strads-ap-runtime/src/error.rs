//! Errors of the runtime, one enum for every layer a user can reach.

use std::path::PathBuf;

/// The result type of every fallible strads-ap operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in a strads-ap operation.
///
/// Every variant names *where*: the file and line of bad input, or the call site of the
/// loop operator and the loop index whose body failed.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be opened, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A line of an input file could not be parsed.
    #[error("{}:{line}: {message} (line: {text:?})", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parser's message.
        message: String,
        /// The offending line, shortened to 80 characters.
        text: String,
    },
    /// An input file has no data lines.
    #[error("{}: the file has no data lines", path.display())]
    EmptyFile {
        /// The file.
        path: PathBuf,
    },
    /// A saved DDS file is not what the caller asked for, or is damaged.
    #[error("{}: {message}", path.display())]
    BadSnapshot {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// An operator was given arguments it cannot work with (sizes, ranges, options).
    #[error("{op}: {message}")]
    InvalidArgument {
        /// The operator, e.g. `DVector::set`.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
    /// An element index past the end of a DVector, in driver code.
    #[error("{op}: index {index} is out of bounds for a DVector of length {len}")]
    IndexOutOfBounds {
        /// The operator.
        op: &'static str,
        /// The index asked for.
        index: usize,
        /// The DVector's length.
        len: usize,
    },
    /// A reduction over a DDS with no elements.
    #[error("{op}: the DDS is empty, so there is nothing to reduce")]
    Empty {
        /// The operator.
        op: &'static str,
    },
    /// A loop body panicked (for example an index out of bounds inside the body).
    #[error("{site}: the loop body panicked at loop index {index}: {message}")]
    BodyPanicked {
        /// Call site of the loop operator, `file:line:column`.
        site: String,
        /// The loop index (async_for) or first element of the mini-batch (sync_for).
        index: usize,
        /// The panic message.
        message: String,
    },
    /// A loop body touched an element that reconnaissance execution did not record for it,
    /// so the conflict-free plan may not cover the access.
    #[error(
        "{site}: {unit} {index} {access} `{table}[{key}]`, which reconnaissance execution \
         did not record for this index ({reason}){changed}. The body's accesses depend on \
         values that changed since reconnaissance ran: values in the tables, or a captured \
         variable (a colour or phase the loop is run with: give each of its values its own \
         call site, since a plan is kept per call site). The call site's cached reconnaissance was \
         dropped, so the next call redoes it; pass `Opts::new().recheck(true)` to redo it \
         before every call ({recheck}), or, where `{table}` is indexed by values drawn \
         afresh (sampled negatives) and its concurrent updates may be summed, declare it \
         relaxed where it is made (`.relaxed(Relaxed::Sum)`): a relaxed table is left out \
         of the plan, and its accesses are not checked against it",
        unit = if *.batched { "the mini-batch from element" } else { "loop index" },
        recheck = if *.batched { "at a reconnaissance's cost per call" } else { "element locks" },
    )]
    AccessOutsidePlan {
        /// Call site of the loop operator.
        site: String,
        /// Whether the loop runs mini-batches (`sync_for!`): `index` is then the first
        /// element of the mini-batch, and `recheck(true)` means a reconnaissance per call
        /// rather than element locks.
        batched: bool,
        /// The loop index whose body made the access (`async_for!`), or the first element
        /// of its mini-batch (`sync_for!`).
        index: usize,
        /// `read` or `wrote`.
        access: &'static str,
        /// The captured variable's name.
        table: &'static str,
        /// The element key.
        key: u64,
        /// Why the access was refused.
        reason: &'static str,
        /// What changed since reconnaissance ran, where the engine can tell: a clause
        /// naming the captured variables whose values changed, or empty.
        changed: String,
    },
    /// Under [`Opts::recheck`](crate::Opts::recheck) across processes, a loop body wrote an
    /// element that reconnaissance, run at the start of this very call, did not see it
    /// write: what the body writes depends on values that other tasks of the same call
    /// change, which no plan can foresee.
    #[error(
        "{site}: loop index {index} wrote `{table}[{key}]`, which reconnaissance at the start \
         of this call did not see it write ({reason}): the body chooses what to write from \
         values other tasks of the same call change (a condition such as `if loss > 0 {{ \
         update }}`), so no plan made before the call holds. Across processes, write the same \
         elements whatever the values (a zero step when the condition fails), declare \
         `{table}` relaxed, or run the loop with `sync_for!`"
    )]
    WritesDependOnValues {
        /// Call site of the loop operator.
        site: String,
        /// The loop index whose body made the access.
        index: usize,
        /// The captured variable's name.
        table: &'static str,
        /// The element key.
        key: u64,
        /// What reconnaissance saw of the element.
        reason: &'static str,
    },
    /// A DDS was used by two operators at once (for example a loop operator inside a body,
    /// or a write while a [`DVector::read_all`](crate::DVector::read_all) result lives).
    #[error(
        "{op}: the DDS is in use by a running operator or by a `read_all` result not yet \
         dropped; drop it first (nested operators are not supported)"
    )]
    Busy {
        /// The operator that found it busy.
        op: &'static str,
    },
    /// The runtime was configured inconsistently (environment variables, init twice).
    #[error("configuration: {0}")]
    Config(String),
    /// A value could not be encoded or decoded.
    #[error("encoding {what}: {message}")]
    Codec {
        /// What was being encoded.
        what: String,
        /// The codec's message.
        message: String,
    },
    /// Another rank of the job died, was disconnected, or broke the protocol; the job
    /// cannot go on.
    #[error("rank {rank} is gone: {reason}")]
    PeerLost {
        /// The lost rank.
        rank: usize,
        /// What happened (exit, idle timeout, a protocol error).
        reason: String,
    },
    /// A rank finished the job (it said goodbye: its program called `finish` or returned)
    /// while this rank waits for a message from it, which can never come.
    #[error(
        "rank {rank} has finished the job while this rank waits for {what} from it: every \
         rank must run the same operators in the same order, and a rank that returns early \
         (an `if rank() == ... {{ return }}`, or an error handled on one rank only) leaves \
         the others waiting"
    )]
    PeerLeft {
        /// The rank that finished.
        rank: usize,
        /// What this rank waited for.
        what: String,
    },
    /// This rank's driver waits for rank `rank`, whose driver waits for another's, and so
    /// on back to this rank's (or into another such cycle): the ranks called different
    /// collectives (or operators) and none can go on.
    #[error(
        "this rank waits for rank {rank} in {mine}, while {others}: the ranks' driver code \
         differs (a branch on `rank()`, or an error handled on one rank only), so they \
         called different collectives and none can go on"
    )]
    Deadlock {
        /// The rank waited for.
        rank: usize,
        /// What this rank waits for.
        mine: String,
        /// The other waits of the cycle, in order ("rank 1 waits for rank 2 in collective
        /// number 3, rank 2 waits for this rank in collective number 3").
        others: String,
    },
    /// Another rank sent data this rank refuses: a message that does not decode, or one that
    /// decodes but breaks what the protocol promises (an access log naming a table or an
    /// element the loop does not have, tasks outside the sender's share). A rank built from
    /// other sources, a bug, or a hostile peer; the call fails instead of trusting it.
    #[error("rank {rank} sent a malformed {what}: {message}")]
    BadPeerData {
        /// The rank that sent the data.
        rank: usize,
        /// What the data was (without an article), with the call site it belongs to.
        what: String,
        /// What is wrong with it.
        message: String,
    },
    /// A wait for other ranks passed its deadline.
    #[error("timed out after {secs:.1} s waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long was waited.
        secs: f64,
    },
    /// The network layer failed (binding a socket, connecting, TLS set-up).
    #[error("transport: {0}")]
    Transport(String),
    /// Another rank of the job failed inside a collective operator (its own error is
    /// reported there); this rank stopped with it.
    #[error("rank {rank} failed: {message}")]
    RemoteFailure {
        /// The rank that failed.
        rank: usize,
        /// Its error.
        message: String,
    },
    /// Ranks reached different operators: the program's control flow diverged.
    #[error("{}", divergence(*rank, driver, here))]
    Divergence {
        /// The rank that disagrees with the driver.
        rank: usize,
        /// The driver's operator call site.
        driver: String,
        /// The other rank's call site.
        here: String,
    },
}

/// A call site as a divergence names it when ranks reached it with other arguments:
/// `SITE [ARGUMENTS]` (read back by [`divergence`]).
pub(crate) fn site_with_arguments(site: &str, arguments: &str) -> String {
    format!("{site} [{arguments}]")
}

/// The divergence sentence: the same operator reached with other arguments (the usual
/// cause being an order that differs between processes), or different operators.
fn divergence(rank: usize, driver: &str, here: &str) -> String {
    let operator = |s: &str| s.split(" [").next().unwrap_or(s).to_string();
    if operator(driver) == operator(here) {
        format!(
            "ranks diverged: rank 0 and rank {rank} reached the same operator with different \
             arguments (rank 0: {driver}; rank {rank}: {here}). Every rank must pass the same \
             values; the usual cause is an order that differs between processes, such as \
             iterating a HashMap or HashSet (its order is random in each process): sort the \
             values first, or use a BTreeMap or BTreeSet"
        )
    } else {
        format!(
            "ranks diverged: rank 0 is at {driver} but rank {rank} is at {here}; every rank \
             must call the same operators in the same order (look for a branch or a loop \
             count that depends on the rank, the clock, or a random number not seeded alike)"
        )
    }
}

/// The same sentence as `Display`, then the errors that caused it if the sentence does not
/// already say them, as `anyhow` prints: an error returned from
/// `fn main() -> strads_ap::Result<()>` reads as the sentence that says what to do.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sentence = self.to_string();
        f.write_str(&sentence)?;
        let mut source = std::error::Error::source(self);
        let mut first = true;
        while let Some(cause) = source {
            let text = cause.to_string();
            if !sentence.contains(&text) {
                if first {
                    f.write_str("\n\nCaused by:")?;
                    first = false;
                }
                write!(f, "\n    {text}")?;
            }
            source = cause.source();
        }
        Ok(())
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            message: message.into(),
        }
    }
}
