//! A diagnosis made from timings on a machine whose cores other processes keep busy says
//! so, instead of sending the user to change a loop that the machine slowed. (In a test
//! binary of its own: the processes it starts to keep the cores busy would slow the other
//! tests of a shared binary.)

mod common;

use std::process::{Child, Command};

use strads_ap::prelude::*;
use strads_ap::Finding;

/// Processes spinning on the cores, stopped when dropped (also when the test fails).
struct Hogs(Vec<Child>);

impl Hogs {
    fn start(count: usize) -> Hogs {
        Hogs(
            (0..count)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .expect("sh starts")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spin(ms: u64) {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(ms) {
        std::hint::spin_loop();
    }
}

/// Whether this kernel reports each thread's wait for a core (Linux with scheduler
/// statistics): after spinning beside `Hogs`, this thread has waited.
fn waits_reported() -> bool {
    spin(20);
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_ascii_whitespace().nth(1)?.parse::<u64>().ok())
        .is_some_and(|ns| ns > 0)
}

#[test]
fn timing_diagnoses_on_a_busy_machine_say_so() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs = Hogs::start(cores);
    // Short calls of tiny bodies: their fixed costs are diagnosed on any machine (see
    // `short_calls_of_tiny_bodies_are_diagnosed_as_fixed_costs` in `diagnose.rs`).
    let n = 2000;
    let own = DVector::from_fn(n, |_| 0u64).unwrap();
    let mut line = 0;
    for _ in 0..6 {
        // Driver work between the calls, so that the loop runs long enough for the
        // machine's clock ticks to tell what the other processes used.
        spin(40);
        line = line!() + 1;
        async_for!(
            0..n,
            |k| {
                own[k] += 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let reported = waits_reported();
    drop(hogs);
    assert_eq!(own.to_vec().unwrap(), vec![6u64; n]);
    if !reported {
        eprintln!("skipped: this kernel does not report threads' waits for a core");
        return;
    }
    let stats = common::stats_at("busy_machine.rs", line);
    let d = stats
        .diagnoses
        .iter()
        .find(|d| d.finding == Finding::FixedCosts)
        .expect("fixed costs diagnosed");
    let others = d
        .others_busy
        .unwrap_or_else(|| panic!("no note: {}", d.message));
    assert!(others >= 0.5, "{others}");
    assert!(
        d.message.contains("other processes kept about")
            && d.message.contains("measure again on a quiet machine"),
        "{}",
        d.message
    );
}
