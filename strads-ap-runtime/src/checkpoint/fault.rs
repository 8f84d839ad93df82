//! Fault injection for tests of recovery: [`env::FAULT_AT`] makes a rank fail at a given
//! loop call.

use super::env;

/// How [`env::FAULT_AT`] makes a rank fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    /// SIGKILL at the start of the loop call.
    Kill,
    /// SIGKILL this many milliseconds into the loop call, from another thread: wherever
    /// the rank then is (inside the loop body, an exchange, driver code, a later call).
    KillAfter(u64),
    /// SIGSTOP: a hung process.
    Stop,
}

/// Reads a value of [`env::FAULT_AT`]: rank, loop call, and how; `None` if malformed.
pub(super) fn parse(v: &str) -> Option<(usize, u64, Fault)> {
    let mut parts = v.split(':');
    let rank = parts.next()?.trim().parse().ok()?;
    let call = parts.next()?.trim().parse().ok()?;
    let how = match parts.next().map(str::trim) {
        None | Some("kill") => Fault::Kill,
        Some("stop") => Fault::Stop,
        Some(ms) => Fault::KillAfter(ms.strip_suffix("ms")?.parse().ok()?),
    };
    Some((rank, call, how))
}

/// The fault to inject ([`env::FAULT_AT`]): rank, loop call, and how.
fn fault_at() -> Option<(usize, u64, Fault)> {
    static FAULT: std::sync::OnceLock<Option<(usize, u64, Fault)>> = std::sync::OnceLock::new();
    *FAULT.get_or_init(|| parse(&std::env::var(env::FAULT_AT).ok()?))
}

/// Loop call `seq` of `rank` starts in a run that is not recovering: fails the process if
/// [`env::FAULT_AT`] asks for it here.
pub(super) fn at_loop_call(rank: usize, seq: u64) {
    if let Some((r, n, how)) = fault_at() {
        if (r, n) == (rank, seq) {
            inject(rank, seq, how);
        }
    }
}

/// Makes this process fail as [`env::FAULT_AT`] asks.
fn inject(rank: usize, seq: u64, how: Fault) {
    let signal = |name: &str| {
        let _ = std::process::Command::new("kill")
            .args([name, &std::process::id().to_string()])
            .status();
    };
    eprintln!(
        "strads-ap: {}: rank {rank} at loop call {seq}: {how:?}",
        env::FAULT_AT
    );
    match how {
        Fault::Kill => signal("-KILL"),
        // Every thread stops, the network's too: the others see silence.
        Fault::Stop => signal("-STOP"),
        Fault::KillAfter(ms) => {
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                signal("-KILL");
                std::process::abort();
            });
            return;
        }
    }
    std::process::abort();
}
