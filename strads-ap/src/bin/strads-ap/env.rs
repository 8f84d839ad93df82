//! The environment variables that make up the launcher ↔ program contract.
//!
//! The runtime reads the same names (`strads_ap::cluster::env` and the QUIC transport's
//! `env` module); a unit test below keeps the lists in step until they live in one place.

/// This process's rank, `0..STRADS_WORLD_SIZE`; rank 0 is the driver. Not set under Slurm,
/// where the program reads `SLURM_PROCID` instead.
pub const RANK: &str = "STRADS_RANK";
/// Number of processes in the job.
pub const WORLD_SIZE: &str = "STRADS_WORLD_SIZE";
/// Worker threads per process; set only when `--threads` is given (default: all cores).
pub const THREADS: &str = "STRADS_THREADS";
// The runtime's own settings (`STRADS_SEED`, `STRADS_VERBOSE`, ...) are not set by the
// launcher; in ssh mode it forwards those of its environment, as the other modes inherit
// them: `strads_ap::cluster::env::SETTINGS`.

/// `host:port` where rank 0 listens and every other rank first connects.
pub const RENDEZVOUS: &str = "STRADS_RENDEZVOUS";
/// The job's secret: 32 random bytes as 64 hex digits. A process without it cannot join
/// the job. Set in local and Slurm modes (never on an ssh command line, where `ps` would
/// show it).
pub const SECRET: &str = "STRADS_SECRET";
/// Path of a file (mode 0600) holding the same secret; set in every mode. In ssh mode it
/// is the only way the secret travels, so the output directory must be on a file system
/// all hosts share.
pub const SECRET_FILE: &str = "STRADS_SECRET_FILE";
/// A short random id of the job (12 hex digits), for logs and file names.
pub const JOB_ID: &str = "STRADS_JOB_ID";
/// Absolute path of the job's output directory (logs, `job.json`, the secret file).
pub const OUTPUT_DIR: &str = "STRADS_OUTPUT_DIR";
/// Seconds a rank waits for the others to join before giving up; set only when
/// `--startup-timeout` is given (the program's default is 60).
pub const STARTUP_TIMEOUT: &str = "STRADS_STARTUP_TIMEOUT";

/// The IP address every rank listens on; set only with `--bind` (default: the local
/// address that routes to the rendezvous; `0.0.0.0` for every interface).
pub const BIND: &str = "STRADS_BIND";

/// The file in the output directory where a rank notes that it waited for a rank that had
/// left the job; a job that failed so is not restarted.
pub const LEFT_EARLY_FILE: &str = "left-early";

/// The file in the output directory where a rank notes the number of a rank it lost; if
/// that rank had exited with code 0, the job is not restarted.
pub const LOST_FILE: &str = "lost-rank";

/// Directory of the job's checkpoints; set only with `--checkpoint-dir` or `--resume`.
pub const CHECKPOINT_DIR: &str = "STRADS_CHECKPOINT_DIR";
/// Checkpoint after every N-th loop call; set only with `--checkpoint-every`.
pub const CHECKPOINT_EVERY: &str = "STRADS_CHECKPOINT_EVERY";
/// Committed checkpoints kept; set only with `--checkpoint-keep`.
pub const CHECKPOINT_KEEP: &str = "STRADS_CHECKPOINT_KEEP";
/// Seconds between checkpoints forced to disk; set only with `--checkpoint-sync`.
pub const CHECKPOINT_SYNC: &str = "STRADS_CHECKPOINT_SYNC";
/// `1` when the job resumes from its checkpoints (after a failure, or `--resume`).
pub const RECOVER: &str = "STRADS_RECOVER";

#[cfg(test)]
mod tests {
    use strads_ap::cluster::env as cluster;
    use strads_ap_runtime::transport::quic::env as quic;

    #[test]
    fn names_match_the_runtime() {
        assert_eq!(super::RANK, cluster::RANK);
        assert_eq!(super::WORLD_SIZE, cluster::WORLD_SIZE);
        assert_eq!(super::THREADS, cluster::THREADS);
        assert_eq!(super::RENDEZVOUS, quic::RENDEZVOUS);
        assert_eq!(super::SECRET, quic::SECRET);
        assert_eq!(super::SECRET_FILE, quic::SECRET_FILE);
        assert_eq!(super::JOB_ID, quic::JOB_ID);
        assert_eq!(super::STARTUP_TIMEOUT, quic::STARTUP_TIMEOUT);
        assert_eq!(super::BIND, quic::BIND);
        assert_eq!(super::OUTPUT_DIR, cluster::OUTPUT_DIR);
        assert_eq!(super::LEFT_EARLY_FILE, cluster::LEFT_EARLY_FILE);
        assert_eq!(super::LOST_FILE, cluster::LOST_FILE);
        use strads_ap::checkpoint::env as ckpt;
        assert_eq!(super::CHECKPOINT_DIR, ckpt::CHECKPOINT_DIR);
        assert_eq!(super::CHECKPOINT_EVERY, ckpt::CHECKPOINT_EVERY);
        assert_eq!(super::CHECKPOINT_KEEP, ckpt::CHECKPOINT_KEEP);
        assert_eq!(super::CHECKPOINT_SYNC, ckpt::CHECKPOINT_SYNC);
        assert_eq!(super::RECOVER, ckpt::RECOVER);
    }

    /// What ssh mode forwards from the launcher's environment is the runtime's settings,
    /// never a variable the launcher sets per job or per rank (the secret above all: an
    /// ssh command line is visible to `ps`).
    #[test]
    fn forwarded_settings_are_none_of_the_launchers_own() {
        use super::*;
        let own = [
            RANK,
            WORLD_SIZE,
            THREADS,
            RENDEZVOUS,
            SECRET,
            SECRET_FILE,
            JOB_ID,
            OUTPUT_DIR,
            STARTUP_TIMEOUT,
            BIND,
            CHECKPOINT_DIR,
            CHECKPOINT_EVERY,
            CHECKPOINT_KEEP,
            CHECKPOINT_SYNC,
            RECOVER,
        ];
        for name in cluster::SETTINGS {
            assert!(name.starts_with("STRADS_"), "{name}");
            assert!(!own.contains(&name), "{name} is the launcher's own");
        }
        assert!(cluster::SETTINGS.contains(&cluster::INTERLEAVE));
    }
}
