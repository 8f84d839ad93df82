//! Whether other processes shared the machine with a loop: from Linux's figures, the CPU
//! time the whole machine spent busy (`/proc/stat`) less this process's own
//! (`/proc/self/stat`), and the time this process's threads spent ready to run but
//! waiting for a free core (`/proc/self/task/*/schedstat`, its second field).
//!
//! A diagnosis made from timings (fixed costs, one worker faster, merges) says so when,
//! since the loop's first call, other processes kept a good part of a core busy *and*
//! this process's threads waited for cores: the machine then shaped the figures, not
//! the loop. (A new user's ALS ran at 0.75× serial on two threads beside another
//! process's job and 1.72× on the quiet machine, and was told to relax a table.) Either
//! figure alone misleads: this process's own threads can outnumber the cores (a plan made
//! aside while the workers run), and other processes may use cores the loop does not need.
//!
//! Read twice per call site at most (its first call, and a diagnosis), never per call.
//! Where the figures cannot be read (another system, a kernel without them), or the
//! loop ran too briefly for the machine's clock ticks to tell, nothing is said.

use std::time::Instant;

/// Other processes that kept at least this many cores busy on average shaped a loop's
/// figures where they left fewer cores than its workers, or this process's threads
/// waited for cores more than [`WAIT_SHARE`] of the workers' time (a quiet machine's
/// daemons use a few hundredths of a core).
pub(crate) const OTHERS_CORES: f64 = 0.3;

/// See [`OTHERS_CORES`]: a quiet machine shows well under 1%; a 2-core machine with one
/// other busy process, 20-33% for each of two busy threads.
pub(crate) const WAIT_SHARE: f64 = 0.1;

/// Below this many seconds the machine's clock ticks (a hundredth of a second each)
/// are too coarse to tell what other processes used.
const MIN_SECS: f64 = 0.1;

/// The machine's and this process's CPU figures at an instant.
#[derive(Clone, Debug)]
pub(crate) struct Usage {
    at: Instant,
    /// (thread id, nanoseconds it waited ready to run since it started)
    threads: Vec<(u32, u64)>,
    ticks: Ticks,
}

/// CPU time in clock ticks: the machine's busy and total over all cores, this process's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Ticks {
    busy: u64,
    total: u64,
    own: u64,
    cores: usize,
}

/// What other processes did to a loop between two [`Usage`]s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Shared {
    /// Cores other processes kept busy on average.
    pub others: f64,
    /// The machine's cores.
    pub cores: usize,
    /// Seconds this process's threads waited for a core, and seconds elapsed.
    pub waited: f64,
    pub secs: f64,
}

impl Usage {
    /// Now, or `None` where the figures cannot be read.
    pub(crate) fn now() -> Option<Usage> {
        let at = Instant::now();
        let ticks = ticks(
            &std::fs::read_to_string("/proc/stat").ok()?,
            &std::fs::read_to_string("/proc/self/stat").ok()?,
        )?;
        let mut threads = Vec::new();
        for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            // A thread that ended meanwhile has no file: its waits are lost, not wrong.
            let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) else {
                continue;
            };
            if let Some(waited) = waited_ns(&text) {
                threads.push((tid, waited));
            }
        }
        Some(Usage { at, threads, ticks })
    }

    /// What other processes did since `earlier` (threads started since count their waits
    /// from zero); `None` over too short a time to tell.
    pub(crate) fn since(&self, earlier: &Usage) -> Option<Shared> {
        let secs = self.at.saturating_duration_since(earlier.at).as_secs_f64();
        let (now, then) = (self.ticks, earlier.ticks);
        let total = now.total.saturating_sub(then.total);
        if secs < MIN_SECS || total == 0 || now.cores == 0 {
            return None;
        }
        let busy = now.busy.saturating_sub(then.busy);
        let own = now.own.saturating_sub(then.own);
        let others = busy.saturating_sub(own) as f64 / total as f64 * now.cores as f64;
        let waited: u64 = self
            .threads
            .iter()
            .map(|&(tid, now)| {
                let before = earlier
                    .threads
                    .iter()
                    .find(|&&(t, _)| t == tid)
                    .map_or(0, |&(_, w)| w);
                now.saturating_sub(before)
            })
            .sum();
        Some(Shared {
            others,
            cores: now.cores,
            waited: waited as f64 * 1e-9,
            secs,
        })
    }
}

impl Shared {
    /// Whether other processes shaped the figures of a loop on `workers` workers: they
    /// kept [`OTHERS_CORES`] busy, and left fewer cores than the workers (by more than
    /// half a core), or this process's threads waited [`WAIT_SHARE`] of the workers' time.
    /// (A loop that went to one worker beside another process waits little once there,
    /// but its calls on all workers were timed while the machine was crowded.)
    pub(crate) fn shaped(&self, workers: usize) -> bool {
        let workers = workers.max(1) as f64;
        let crowded = (self.cores as f64 - self.others) < workers - 0.5;
        let waited = self.waited > WAIT_SHARE * self.secs * workers;
        self.others >= OTHERS_CORES && (crowded || waited)
    }

    /// The words a timing diagnosis ends with.
    pub(crate) fn note(&self) -> String {
        format!(
            "\n  note: other processes kept about {:.1} of the machine's {} cores busy \
             since this loop's first call, and threads of this process waited for a free \
             core {} in all over {}: the figures above reflect the machine as much as the \
             loop, so measure again on a quiet machine before changing the loop",
            self.others,
            self.cores,
            duration(self.waited),
            duration(self.secs)
        )
    }
}

/// `secs` in milliseconds below a second, else in seconds.
fn duration(secs: f64) -> String {
    match secs < 1.0 {
        true => format!("{:.0} ms", secs * 1e3),
        false => format!("{secs:.2} s"),
    }
}

/// The wait of a `schedstat` line: `run-time wait-time timeslices`, in nanoseconds.
fn waited_ns(schedstat: &str) -> Option<u64> {
    let mut fields = schedstat.split_ascii_whitespace();
    fields.next()?;
    fields.next()?.parse().ok()
}

/// The ticks of `/proc/stat` (its `cpu` line: user, nice, system, idle, iowait, irq,
/// softirq, steal, ...; busy is all but idle and iowait, and counts time other virtual
/// machines took, `steal`) and of `/proc/self/stat` (user and system time, the 14th and
/// 15th fields, the 12th and 13th after the command's closing parenthesis).
fn ticks(stat: &str, own: &str) -> Option<Ticks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_ascii_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal] = f[..] else {
        return None;
    };
    let cores = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l[3..].starts_with(|c: char| c.is_ascii_digit()))
        .count();
    let after = &own[own.rfind(')')? + 1..];
    let mut fields = after.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let busy = user + nice + system + irq + softirq + steal;
    Some(Ticks {
        busy,
        total: busy + idle + iowait,
        own: utime + stime,
        cores,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_wait_is_the_second_field() {
        assert_eq!(waited_ns("123 4567 8\n"), Some(4567));
        assert_eq!(waited_ns("0 0 1"), Some(0));
        assert_eq!(waited_ns("123"), None);
        assert_eq!(waited_ns("1 x 2"), None);
    }

    #[test]
    fn ticks_are_read_from_both_files() {
        let stat = "cpu  100 1 20 300 4 0 5 7 0 0\ncpu0 50 0 10 150 2 0 3 3 0 0\n\
                    cpu1 50 1 10 150 2 0 2 4 0 0\nintr 1 2\nctxt 9\n";
        // A command with a space and a parenthesis in its name.
        let own = "4242 (my (prog) x) R 1 2 3 0 -1 4194304 131 0 0 0 11 4 0 0 20 0 1 0";
        assert_eq!(
            ticks(stat, own),
            Some(Ticks {
                busy: 133,
                total: 437,
                own: 15,
                cores: 2
            })
        );
        assert_eq!(ticks("cpu  1 2 3\n", own), None);
        assert_eq!(ticks(stat, "4242 (prog) R 1"), None);
    }

    /// Other processes' cores are the machine's busy ticks less this process's, over
    /// its total; waits count per thread since the earlier reading, a thread new since
    /// then from zero. Both must be large for the figures to count as shaped.
    #[test]
    fn others_and_waits_are_counted_since_the_earlier_reading() {
        let at = Instant::now();
        let total = 400;
        let earlier = |cores| Usage {
            at,
            threads: vec![(1, 1_000_000_000), (2, 0)],
            ticks: Ticks {
                busy: 1000,
                total: 5000,
                own: 100,
                cores,
            },
        };
        let usage = |cores, busy: u64, own: u64, waits: Vec<(u32, u64)>| Usage {
            at: at + Duration::from_secs(2),
            threads: waits,
            ticks: Ticks {
                busy: 1000 + busy,
                total: 5000 + total,
                own: 100 + own,
                cores,
            },
        };
        // 2 s on 2 cores: 400 ticks; 300 busy, 100 of them this process's.
        let waits = vec![(1, 1_400_000_000), (2, 200_000_000), (3, 200_000_000)];
        let busy = usage(2, 300, 100, waits.clone());
        let s = busy.since(&earlier(2)).unwrap();
        assert!((s.others - 1.0).abs() < 1e-12, "{s:?}");
        assert!((s.waited - 0.8).abs() < 1e-12 && (s.secs - 2.0).abs() < 1e-12);
        assert!(
            s.shaped(2),
            "a core's worth of others, waits 20% of 2 workers' time"
        );
        assert!(
            s.note().contains("about 1.0 of the machine's 2 cores"),
            "{}",
            s.note()
        );
        assert!(s.note().contains("a free core 800 ms in all over 2.00 s"));
        // Crowded without waits: a loop that ran on one worker beside the others.
        let no_waits = vec![(1, 1_000_000_000), (2, 0)];
        let one = usage(2, 300, 100, no_waits.clone())
            .since(&earlier(2))
            .unwrap();
        assert!(one.shaped(2), "{one:?}");
        // This process's own threads waiting (more threads than cores), nobody else busy.
        let own = usage(2, 300, 290, waits.clone())
            .since(&earlier(2))
            .unwrap();
        assert!(!own.shaped(2), "{own:?}");
        // Others busy on 8 cores: 4 left for 2 workers, which never waited.
        let spare = usage(8, 300, 100, no_waits).since(&earlier(8)).unwrap();
        assert!((spare.others - 4.0).abs() < 1e-12);
        assert!(!spare.shaped(2), "{spare:?}");
        // The same with waits: the loop's threads did not get the cores.
        assert!(usage(8, 300, 100, waits)
            .since(&earlier(8))
            .unwrap()
            .shaped(2));
        // Too short to tell.
        let mut short = busy.clone();
        short.at = at + Duration::from_millis(50);
        assert_eq!(short.since(&earlier(2)), None);
    }

    /// On Linux this process's figures can be read, its main thread among its threads.
    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_can_be_read() {
        let now = Usage::now().expect("/proc/stat, /proc/self/stat and schedstat");
        assert!(now
            .threads
            .iter()
            .any(|&(tid, _)| tid == std::process::id()));
        assert!(now.ticks.cores >= 1 && now.ticks.total >= now.ticks.busy);
    }
}
