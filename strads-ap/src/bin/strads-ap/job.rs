//! A job and the processes that make it up, decided without starting anything.

use crate::{env, slurm, ssh};
use rand::RngCore;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Where the ranks run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Every rank a child process of the launcher on this machine.
    Local,
    /// Rank `r` through `ssh hosts[r]`, in `cwd` there.
    Ssh {
        /// The ssh destination of each rank.
        hosts: Vec<String>,
        /// The directory the ranks start in (the launcher's, on a shared file system).
        cwd: PathBuf,
        /// `STRADS_*` settings of the launcher's environment to pass on (ssh does not
        /// carry the environment over).
        forward: Vec<(&'static str, OsString)>,
    },
    /// One `srun` inside a Slurm allocation.
    Slurm,
}

/// Everything the ranks are told about their job.
#[derive(Clone, Debug)]
pub struct Job {
    /// Short random id.
    pub id: String,
    /// Number of ranks.
    pub ranks: usize,
    /// Worker threads per rank, when given.
    pub threads: Option<usize>,
    /// `host:port` of rank 0.
    pub rendezvous: String,
    /// The job's secret, 64 hex digits.
    pub secret: String,
    /// Absolute output directory.
    pub output_dir: PathBuf,
    /// Seconds to wait for the other ranks at startup, when given.
    pub startup_timeout: Option<u64>,
    /// The address every rank listens on, when given.
    pub bind: Option<std::net::IpAddr>,
    /// Where the ranks run.
    pub placement: Placement,
    /// Checkpoints of the job, when asked for.
    pub checkpoint: Option<Checkpointing>,
    /// Whether this start resumes from the checkpoints.
    pub recover: bool,
}

/// Where and how often the ranks checkpoint.
#[derive(Clone, Debug)]
pub struct Checkpointing {
    /// Absolute checkpoint directory.
    pub dir: PathBuf,
    /// Every N-th loop call, when given.
    pub every: Option<u64>,
    /// Checkpoints kept, when given.
    pub keep: Option<usize>,
    /// How often checkpoints are forced to disk, when given.
    pub sync: Option<std::time::Duration>,
}

/// Where a process's stdout and stderr go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// The launcher's own stdout and stderr; its stdin too unless that is a terminal.
    Terminal,
    /// Both streams to this file, stdin from `/dev/null`.
    Log(PathBuf),
}

/// One process the launcher starts and watches.
#[derive(Clone, Debug)]
pub struct Proc {
    /// The rank it runs, or `None` for the `srun` that runs them all.
    pub rank: Option<usize>,
    /// How messages name it: `rank 2`, `rank 2 on node3`, `srun`.
    pub label: String,
    /// What is executed.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables set on top of the launcher's environment.
    pub env: Vec<(&'static str, OsString)>,
    /// Variables removed from the launcher's environment.
    pub env_remove: Vec<&'static str>,
    /// Where its output goes.
    pub output: Output,
}

impl Job {
    /// The path of the secret file.
    pub fn secret_file(&self) -> PathBuf {
        self.output_dir.join("secret")
    }

    /// The path of rank `rank`'s log file (ranks other than 0).
    pub fn log_file(&self, rank: usize) -> PathBuf {
        self.output_dir.join(format!("rank-{rank}.log"))
    }

    /// The path of the job summary.
    pub fn summary_file(&self) -> PathBuf {
        self.output_dir.join("job.json")
    }

    /// The contract variables for `rank` (`None`: let Slurm number the ranks), with the
    /// secret itself only when `inline_secret`.
    fn env(&self, rank: Option<usize>, inline_secret: bool) -> Vec<(&'static str, OsString)> {
        let mut vars: Vec<(&'static str, OsString)> = Vec::new();
        if let Some(rank) = rank {
            vars.push((env::RANK, rank.to_string().into()));
        }
        vars.push((env::WORLD_SIZE, self.ranks.to_string().into()));
        if let Some(threads) = self.threads {
            vars.push((env::THREADS, threads.to_string().into()));
        }
        vars.push((env::RENDEZVOUS, self.rendezvous.clone().into()));
        if inline_secret {
            vars.push((env::SECRET, self.secret.clone().into()));
        }
        vars.push((env::SECRET_FILE, self.secret_file().into()));
        vars.push((env::JOB_ID, self.id.clone().into()));
        vars.push((env::OUTPUT_DIR, self.output_dir.clone().into()));
        if let Some(secs) = self.startup_timeout {
            vars.push((env::STARTUP_TIMEOUT, secs.to_string().into()));
        }
        if let Some(ip) = self.bind {
            vars.push((env::BIND, ip.to_string().into()));
        }
        if let Some(c) = &self.checkpoint {
            vars.push((env::CHECKPOINT_DIR, c.dir.clone().into()));
            if let Some(n) = c.every {
                vars.push((env::CHECKPOINT_EVERY, n.to_string().into()));
            }
            if let Some(k) = c.keep {
                vars.push((env::CHECKPOINT_KEEP, k.to_string().into()));
            }
            if let Some(d) = c.sync {
                vars.push((env::CHECKPOINT_SYNC, d.as_secs_f64().to_string().into()));
            }
            if self.recover {
                vars.push((env::RECOVER, "1".into()));
            }
        }
        vars
    }

    /// The processes that run `program args` as this job's ranks.
    pub fn processes(&self, program: &OsString, args: &[OsString]) -> Vec<Proc> {
        let output = |rank: usize| match rank {
            0 => Output::Terminal,
            r => Output::Log(self.log_file(r)),
        };
        match &self.placement {
            Placement::Local => (0..self.ranks)
                .map(|rank| Proc {
                    rank: Some(rank),
                    label: format!("rank {rank}"),
                    program: program.clone(),
                    args: args.to_vec(),
                    env: self.env(Some(rank), true),
                    env_remove: Vec::new(),
                    output: output(rank),
                })
                .collect(),
            Placement::Ssh {
                hosts,
                cwd,
                forward,
            } => hosts
                .iter()
                .enumerate()
                .map(|(rank, host)| {
                    let mut vars = self.env(Some(rank), false);
                    vars.extend(forward.iter().cloned());
                    let remote = ssh::remote_command(cwd, &vars, program, args);
                    Proc {
                        rank: Some(rank),
                        label: format!("rank {rank} on {host}"),
                        program: "ssh".into(),
                        args: ssh::ssh_args(host, remote),
                        env: Vec::new(),
                        env_remove: Vec::new(),
                        output: output(rank),
                    }
                })
                .collect(),
            Placement::Slurm => vec![Proc {
                rank: None,
                label: "srun".into(),
                program: "srun".into(),
                args: slurm::srun_args(self.ranks, self.threads, program, args),
                env: self.env(None, true),
                env_remove: vec![env::RANK],
                output: Output::Terminal,
            }],
        }
    }
}

/// `bytes` random bytes from the operating system, as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    raw.iter()
        .fold(String::with_capacity(2 * bytes), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(placement: Placement) -> Job {
        Job {
            id: "0123456789ab".into(),
            ranks: 3,
            threads: Some(4),
            rendezvous: "node1:29517".into(),
            secret: "ab".repeat(32),
            output_dir: "/shared/logs/j".into(),
            startup_timeout: Some(30),
            placement,
            checkpoint: None,
            recover: false,
            bind: Some("10.0.0.7".parse().unwrap()),
        }
    }

    fn value<'a>(proc: &'a Proc, name: &str) -> Option<&'a str> {
        proc.env
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_str().unwrap())
    }

    #[test]
    fn local_ranks_get_the_whole_contract() {
        let procs = job(Placement::Local).processes(&"./train".into(), &["-x".into()]);
        assert_eq!(procs.len(), 3);
        for (rank, proc) in procs.iter().enumerate() {
            assert_eq!(proc.rank, Some(rank));
            assert_eq!(proc.program, "./train");
            assert_eq!(proc.args, ["-x"]);
            assert_eq!(value(proc, env::RANK), Some(rank.to_string().as_str()));
            assert_eq!(value(proc, env::WORLD_SIZE), Some("3"));
            assert_eq!(value(proc, env::THREADS), Some("4"));
            assert_eq!(value(proc, env::RENDEZVOUS), Some("node1:29517"));
            assert_eq!(value(proc, env::SECRET), Some("ab".repeat(32).as_str()));
            assert_eq!(value(proc, env::SECRET_FILE), Some("/shared/logs/j/secret"));
            assert_eq!(value(proc, env::JOB_ID), Some("0123456789ab"));
            assert_eq!(value(proc, env::OUTPUT_DIR), Some("/shared/logs/j"));
            assert_eq!(value(proc, env::STARTUP_TIMEOUT), Some("30"));
            assert_eq!(value(proc, env::BIND), Some("10.0.0.7"));
        }
        assert_eq!(procs[0].output, Output::Terminal);
        assert_eq!(
            procs[2].output,
            Output::Log("/shared/logs/j/rank-2.log".into())
        );
    }

    #[test]
    fn optional_variables_are_left_out() {
        let mut job = job(Placement::Local);
        job.threads = None;
        job.startup_timeout = None;
        job.bind = None;
        let procs = job.processes(&"p".into(), &[]);
        assert_eq!(value(&procs[0], env::THREADS), None);
        assert_eq!(value(&procs[0], env::BIND), None);
        assert_eq!(value(&procs[0], env::STARTUP_TIMEOUT), None);
    }

    #[test]
    fn ssh_ranks_get_the_secret_file_only() {
        let placement = Placement::Ssh {
            hosts: vec!["node1".into(), "node1".into(), "bob@node2".into()],
            cwd: "/home/me/proj".into(),
            forward: vec![(strads_ap::cluster::env::SEED, "7".into())],
        };
        let procs = job(placement).processes(&"./train".into(), &["a b".into()]);
        assert_eq!(procs.len(), 3);
        let last = &procs[2];
        assert_eq!(last.label, "rank 2 on bob@node2");
        assert_eq!(last.program, "ssh");
        assert!(last.env.is_empty());
        assert_eq!(
            last.args,
            [
                OsString::from("-o"),
                "BatchMode=yes".into(),
                "bob@node2".into(),
                "cd /home/me/proj && exec env STRADS_RANK=2 STRADS_WORLD_SIZE=3 \
                 STRADS_THREADS=4 STRADS_RENDEZVOUS=node1:29517 \
                 STRADS_SECRET_FILE=/shared/logs/j/secret STRADS_JOB_ID=0123456789ab \
                 STRADS_OUTPUT_DIR=/shared/logs/j STRADS_STARTUP_TIMEOUT=30 STRADS_BIND=10.0.0.7 STRADS_SEED=7 \
                 ./train 'a b'"
                    .into(),
            ]
        );
        assert_eq!(procs[0].output, Output::Terminal);
        assert_eq!(last.output, Output::Log("/shared/logs/j/rank-2.log".into()));
    }

    #[test]
    fn slurm_runs_one_srun_without_a_rank() {
        let procs = job(Placement::Slurm).processes(&"./train".into(), &["-x".into()]);
        assert_eq!(procs.len(), 1);
        let srun = &procs[0];
        assert_eq!(srun.rank, None);
        assert_eq!(srun.program, "srun");
        assert_eq!(
            srun.args,
            [
                "--ntasks=3",
                "--kill-on-bad-exit=1",
                "--cpus-per-task=4",
                "./train",
                "-x"
            ]
        );
        assert_eq!(value(srun, env::RANK), None);
        assert_eq!(srun.env_remove, [env::RANK]);
        assert_eq!(value(srun, env::WORLD_SIZE), Some("3"));
        assert_eq!(value(srun, env::SECRET), Some("ab".repeat(32).as_str()));
        assert_eq!(value(srun, env::SECRET_FILE), Some("/shared/logs/j/secret"));
        assert_eq!(srun.output, Output::Terminal);
    }

    #[test]
    fn random_hex_has_the_length_asked_and_varies() {
        let a = random_hex(32);
        assert_eq!(a.len(), 64);
        assert!(a
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, random_hex(32));
        assert_eq!(random_hex(6).len(), 12);
    }
}
