//! Where and how often to checkpoint, and whether a run recovers: [`CheckpointConfig`],
//! from code or from the launcher's environment variables ([`mod@env`]).
//!
//! A leaf module: it imports neither [`crate::cluster`] nor [`crate::checkpoint`], so the
//! job's [`Config`](crate::Config) can carry a checkpoint configuration without the
//! cluster knowing the checkpoints. It is public as `checkpoint::CheckpointConfig` and
//! `checkpoint::env`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// The environment variables of checkpointing.
pub mod env {
    /// Directory of the job's checkpoints; unset: no checkpoints.
    pub const CHECKPOINT_DIR: &str = "STRADS_CHECKPOINT_DIR";
    /// Checkpoint after every N-th loop call (default 1).
    pub const CHECKPOINT_EVERY: &str = "STRADS_CHECKPOINT_EVERY";
    /// Committed checkpoints kept (default 2).
    pub const CHECKPOINT_KEEP: &str = "STRADS_CHECKPOINT_KEEP";
    /// Force checkpoints to disk at most every this many seconds (default 10; 0: every
    /// checkpoint).
    pub const CHECKPOINT_SYNC: &str = "STRADS_CHECKPOINT_SYNC";
    /// `1`: this run resumes from the checkpoints (fast re-execution).
    pub const RECOVER: &str = "STRADS_RECOVER";
    /// Fault injection for tests of recovery, ignored when the run is recovering: `R:N`
    /// kills rank `R` (SIGKILL, like `kill -9`) at the start of its `N`-th loop call;
    /// `R:N:MSms` kills it `MS` milliseconds later, wherever it then is; `R:N:stop` stops
    /// it (SIGSTOP, a hung process that the others detect by the transport's idle
    /// timeout). Only builds with the test-only cargo feature `fault-injection` read it;
    /// others ignore it with a warning.
    pub const FAULT_AT: &str = "STRADS_FAULT_AT";
}

/// Where and how often to checkpoint, and whether this run recovers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// The job's checkpoint directory (local disk or a shared file system; each rank
    /// writes its own files, rank 0 the manifests).
    pub dir: PathBuf,
    /// Checkpoint after every `every`-th loop call.
    pub every: u64,
    /// Committed checkpoints to keep (and the newest synced one besides).
    pub keep: usize,
    /// Force checkpoints to disk (fsync) at most this often; zero: every checkpoint.
    pub sync_every: Duration,
    /// Resume from the newest valid checkpoint in `dir`.
    pub recover: bool,
}

impl CheckpointConfig {
    /// Checkpoints in `dir` after every loop call, keeping the last 2; not recovering.
    ///
    /// # Examples
    /// ```
    /// use strads_ap_runtime::checkpoint::CheckpointConfig;
    /// let c = CheckpointConfig::new("/tmp/ckpt").every(5).keep(3).recover(true);
    /// assert_eq!((c.every, c.keep, c.recover), (5, 3, true));
    /// ```
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CheckpointConfig {
            dir: dir.into(),
            every: 1,
            keep: 2,
            sync_every: Duration::from_secs(10),
            recover: false,
        }
    }

    /// Checkpoint after every `n`-th loop call (at least 1).
    pub fn every(mut self, n: u64) -> Self {
        self.every = n.max(1);
        self
    }

    /// Keep the last `k` committed checkpoints (at least 1).
    pub fn keep(mut self, k: usize) -> Self {
        self.keep = k.max(1);
        self
    }

    /// Force checkpoints to disk at most every `d` (zero: every checkpoint, each loop
    /// then waits for the disk less than it competes with it for bandwidth).
    pub fn sync_every(mut self, d: Duration) -> Self {
        self.sync_every = d;
        self
    }

    /// Whether this run resumes from the checkpoints.
    pub fn recover(mut self, recover: bool) -> Self {
        self.recover = recover;
        self
    }

    /// Reads the variables of [`mod@env`]: `None` when `STRADS_CHECKPOINT_DIR` is unset.
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_vars(|name| std::env::var_os(name))
    }

    /// [`CheckpointConfig::from_env`] with the variables looked up by `var`. A value that
    /// is not Unicode counts as unset, except the directory, which may be any path.
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<Option<Self>> {
        let dir = match var(env::CHECKPOINT_DIR) {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => return Ok(None),
        };
        let text = |name: &str| var(name).and_then(|v| v.into_string().ok());
        let number = |name: &str, default: u64| -> Result<u64> {
            match text(name) {
                Some(v) => v.trim().parse::<u64>().map_err(|_| {
                    Error::Config(format!("{name}={v:?} is not a non-negative integer"))
                }),
                None => Ok(default),
            }
        };
        let sync = match text(env::CHECKPOINT_SYNC) {
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| {
                    Error::Config(format!(
                        "{}={v:?} is not a non-negative number of seconds",
                        env::CHECKPOINT_SYNC
                    ))
                })?,
            None => Duration::from_secs(10),
        };
        Ok(Some(
            CheckpointConfig::new(dir)
                .every(number(env::CHECKPOINT_EVERY, 1)?)
                .keep(number(env::CHECKPOINT_KEEP, 2)? as usize)
                .sync_every(sync)
                .recover(number(env::RECOVER, 0)? != 0),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::ffi::OsString;
    use std::time::Duration;

    use super::{env, CheckpointConfig};
    use crate::error::{Error, Result};

    /// `from_vars` over just `vars`.
    fn parse(vars: &[(&str, &str)]) -> Result<Option<CheckpointConfig>> {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        CheckpointConfig::from_vars(|name| vars.get(name).cloned())
    }

    fn config_error(vars: &[(&str, &str)]) -> String {
        match parse(vars) {
            Err(Error::Config(message)) => message,
            other => panic!("{vars:?} gave {other:?}, not a configuration error"),
        }
    }

    #[test]
    fn no_directory_means_no_checkpoints() {
        assert_eq!(parse(&[]).unwrap(), None);
        assert_eq!(parse(&[(env::CHECKPOINT_DIR, "")]).unwrap(), None);
        // The other variables are not even read without a directory.
        assert_eq!(parse(&[(env::CHECKPOINT_EVERY, "x")]).unwrap(), None);
    }

    #[test]
    fn a_directory_alone_takes_the_defaults() {
        let c = parse(&[(env::CHECKPOINT_DIR, "/ckpt")]).unwrap().unwrap();
        assert_eq!(c, CheckpointConfig::new("/ckpt"));
        assert_eq!(
            (c.every, c.keep, c.sync_every, c.recover),
            (1, 2, Duration::from_secs(10), false)
        );
    }

    #[test]
    fn every_variable_is_read_and_trimmed() {
        let c = parse(&[
            (env::CHECKPOINT_DIR, "/ckpt"),
            (env::CHECKPOINT_EVERY, " 5 "),
            (env::CHECKPOINT_KEEP, "3\n"),
            (env::CHECKPOINT_SYNC, " 0.25"),
            (env::RECOVER, "1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            c,
            CheckpointConfig::new("/ckpt")
                .every(5)
                .keep(3)
                .sync_every(Duration::from_millis(250))
                .recover(true)
        );
        let zero_sync = parse(&[(env::CHECKPOINT_DIR, "d"), (env::CHECKPOINT_SYNC, "0")]);
        assert_eq!(zero_sync.unwrap().unwrap().sync_every, Duration::ZERO);
    }

    #[test]
    fn recover_is_any_number_but_zero() {
        for (value, recover) in [("0", false), ("1", true), ("2", true)] {
            let c = parse(&[(env::CHECKPOINT_DIR, "d"), (env::RECOVER, value)]);
            assert_eq!(c.unwrap().unwrap().recover, recover, "{value}");
        }
    }

    #[test]
    fn zero_every_and_keep_are_raised_to_one() {
        let c = parse(&[
            (env::CHECKPOINT_DIR, "d"),
            (env::CHECKPOINT_EVERY, "0"),
            (env::CHECKPOINT_KEEP, "0"),
        ]);
        let c = c.unwrap().unwrap();
        assert_eq!((c.every, c.keep), (1, 1));
    }

    #[test]
    fn bad_numbers_are_refused_naming_the_variable_and_value() {
        for (name, value) in [
            (env::CHECKPOINT_EVERY, "five"),
            (env::CHECKPOINT_EVERY, "-1"),
            (env::CHECKPOINT_KEEP, "2.5"),
            (env::RECOVER, "yes"),
        ] {
            let message = config_error(&[(env::CHECKPOINT_DIR, "d"), (name, value)]);
            assert_eq!(
                message,
                format!("{name}={value:?} is not a non-negative integer")
            );
        }
    }

    #[test]
    fn bad_sync_periods_are_refused() {
        for value in ["-1", "soon", "1e400", "NaN", ""] {
            let message =
                config_error(&[(env::CHECKPOINT_DIR, "d"), (env::CHECKPOINT_SYNC, value)]);
            assert_eq!(
                message,
                format!(
                    "{}={value:?} is not a non-negative number of seconds",
                    env::CHECKPOINT_SYNC
                )
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn values_that_are_not_unicode_count_as_unset_except_the_directory() {
        use std::os::unix::ffi::OsStringExt;
        let odd = || OsString::from_vec(vec![b'd', 0xff]);
        let c = CheckpointConfig::from_vars(|name| {
            (name == env::CHECKPOINT_DIR || name == env::CHECKPOINT_EVERY).then(odd)
        });
        let c = c.unwrap().unwrap();
        assert_eq!(c.dir.as_os_str(), odd().as_os_str());
        assert_eq!(c.every, 1);
    }
}
