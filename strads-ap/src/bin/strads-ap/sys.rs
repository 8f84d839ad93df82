//! The system calls the standard library does not wrap. All of the launcher's `unsafe`
//! is here.

use std::process::{Command, ExitStatus};

pub use libc::{SIGKILL, SIGTERM};

/// Makes the kernel send SIGKILL to the child once the launcher dies, however it dies
/// (Linux `PR_SET_PDEATHSIG`; elsewhere this does nothing).
///
/// The signal follows the death of the *thread* that spawned the child, so spawn from a
/// thread that lives as long as the job (the launcher spawns from `main`).
pub fn die_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the hook runs in the child between fork and exec, where only
        // async-signal-safe code may run. It makes three raw system calls (prctl, getppid,
        // _exit), allocates nothing, takes no lock, and reads only `parent`, an integer
        // copied into the closure. `io::Error::last_os_error` reads errno into a plain
        // value without allocating.
        unsafe {
            command.pre_exec(move || {
                let signal = libc::SIGKILL as libc::c_ulong;
                if libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The launcher may have died before prctl took effect: then the child
                // has been handed to another parent, and no signal will come.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// Sends `signal` to every process in the process group whose leader is `leader` (a child
/// spawned with `process_group(0)`), so helpers a rank started go too. A group that no
/// longer exists is not an error.
pub fn signal_group(leader: u32, signal: libc::c_int) {
    let Ok(group) = libc::pid_t::try_from(leader) else {
        return;
    };
    // Group ids 0 and 1 would address the launcher's own group or every process.
    if group <= 1 {
        return;
    }
    // SAFETY: kill(2) takes two integers and touches no memory of this process; a
    // negative pid addresses a process group. A failure (ESRCH: the group is gone) is
    // harmless and ignored.
    unsafe {
        libc::kill(-group, signal);
    }
}

/// Reaps child `pid` if it has ended (or, with `block`, once it ends): how it ended, and
/// its peak resident memory in bytes (`wait4`'s `ru_maxrss`). `None`: still running.
///
/// The launcher reaps its children only through this, never through `Child::wait`, so
/// that the memory figure is not lost.
pub fn reap(pid: u32, block: bool) -> std::io::Result<Option<(ExitStatus, u64)>> {
    use std::os::unix::process::ExitStatusExt;
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct of integers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let options = if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: wait4(2) writes only to `status` and `usage`, both live locals of the
        // right types, for the duration of the call.
        let got = unsafe { libc::wait4(pid, &mut status, options, &mut usage) };
        match got {
            0 => return Ok(None),
            p if p == pid => {
                // Linux reports `ru_maxrss` in KiB.
                let peak = u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024;
                return Ok(Some((ExitStatus::from_raw(status), peak)));
            }
            _ => {
                let error = std::io::Error::last_os_error();
                if error.kind() != std::io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
}

/// The usual name of a signal, for messages.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}
