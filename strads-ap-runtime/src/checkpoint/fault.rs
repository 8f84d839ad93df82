//! Fault injection for tests of recovery: [`env::FAULT_AT`] makes a rank fail at a given
//! loop call.
//!
//! Only builds with the test-only cargo feature `fault-injection` can fail on purpose;
//! the crates whose tests inject faults turn it on for their dev-dependencies. Other
//! builds ignore the variable, saying so once.

use super::env;

/// Loop call `seq` of `rank` starts in a run that is not recovering: fails the process if
/// [`env::FAULT_AT`] asks for it here.
#[cfg(feature = "fault-injection")]
pub(super) fn at_loop_call(rank: usize, seq: u64) {
    if let Some((r, n, how)) = inject::fault_at() {
        if (r, n) == (rank, seq) {
            inject::inject(rank, seq, how);
        }
    }
}

/// Loop call `seq` of `rank` starts in a run that is not recovering: without the
/// `fault-injection` feature, a set [`env::FAULT_AT`] is ignored with a warning (once per
/// process).
#[cfg(not(feature = "fault-injection"))]
pub(super) fn at_loop_call(_rank: usize, _seq: u64) {
    static CHECKED: std::sync::Once = std::sync::Once::new();
    CHECKED.call_once(|| {
        if let Some(message) = ignored(std::env::var_os(env::FAULT_AT).is_some()) {
            super::warn(&message);
        }
    });
}

/// The warning for a build without fault injection when [`env::FAULT_AT`] is `set`.
#[cfg(any(test, not(feature = "fault-injection")))]
fn ignored(set: bool) -> Option<String> {
    set.then(|| {
        format!(
            "{} is set, but this build has no fault injection (the test-only feature \
             `fault-injection` of strads-ap); ignored",
            env::FAULT_AT
        )
    })
}

#[cfg(feature = "fault-injection")]
mod inject {
    use super::env;

    /// How [`env::FAULT_AT`] makes a rank fail.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum Fault {
        /// SIGKILL at the start of the loop call.
        Kill,
        /// SIGKILL this many milliseconds into the loop call, from another thread:
        /// wherever the rank then is (inside the loop body, an exchange, driver code, a
        /// later call).
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
    pub(super) fn fault_at() -> Option<(usize, u64, Fault)> {
        static FAULT: std::sync::OnceLock<Option<(usize, u64, Fault)>> = std::sync::OnceLock::new();
        *FAULT.get_or_init(|| parse(&std::env::var(env::FAULT_AT).ok()?))
    }

    /// Makes this process fail as [`env::FAULT_AT`] asks.
    pub(super) fn inject(rank: usize, seq: u64, how: Fault) {
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
}

#[cfg(test)]
mod tests {
    #[test]
    fn without_the_variable_nothing_is_said() {
        assert_eq!(super::ignored(false), None);
    }

    #[test]
    fn a_build_without_fault_injection_says_it_ignores_the_variable() {
        let message = super::ignored(true).unwrap();
        assert!(
            message.starts_with("STRADS_FAULT_AT is set, but"),
            "{message}"
        );
        assert!(message.contains("`fault-injection`"), "{message}");
    }

    #[cfg(feature = "fault-injection")]
    #[test]
    fn fault_specifications_are_parsed() {
        use super::inject::{parse, Fault};
        assert_eq!(parse("1:3"), Some((1, 3, Fault::Kill)));
        assert_eq!(parse(" 0 : 5 :kill"), Some((0, 5, Fault::Kill)));
        assert_eq!(parse("1:4:stop"), Some((1, 4, Fault::Stop)));
        assert_eq!(parse("0:4:7ms"), Some((0, 4, Fault::KillAfter(7))));
        for bad in ["", "1", "x:3", "1:y", "1:3:7", "1:3:soon", "-1:3"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
