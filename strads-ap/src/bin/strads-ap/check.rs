//! `strads-ap check`: one rank of a job that checks the cluster works.

use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

/// Options of `strads-ap check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// MiB broadcast from rank 0 to time bulk transfer.
    #[arg(long, default_value_t = 16)]
    mib: usize,
    /// Barriers timed.
    #[arg(long, default_value_t = 100)]
    barriers: usize,
    /// Testing aid: this rank exits at once with code 3 after joining, without leaving
    /// the job cleanly (the others must not hang).
    #[arg(long, value_name = "RANK", hide = true)]
    exit_rank: Option<usize>,
    /// Testing aid: this rank leaves the job cleanly (`finish`) right after joining and
    /// exits with code 0, as a program that returns early on one rank does (the others
    /// must fail naming it, not hang).
    #[arg(long, value_name = "RANK", hide = true)]
    leave_rank: Option<usize>,
    /// Testing aid: this rank exits with code 0 right after joining without leaving the
    /// job (`exit(0)` mid-job): the others lose it, and the launcher must not restart.
    #[arg(long, value_name = "RANK", hide = true)]
    vanish_rank: Option<usize>,
}

pub fn main(args: CheckArgs) -> ExitCode {
    match check(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strads-ap check (rank {}): {e}", rank_from_env());
            ExitCode::from(1)
        }
    }
}

fn rank_from_env() -> String {
    std::env::var("STRADS_RANK").unwrap_or_else(|_| "?".into())
}

fn check(args: &CheckArgs) -> strads_ap::Result<()> {
    let joined = Instant::now();
    strads_ap::init()?;
    let join_secs = joined.elapsed().as_secs_f64();
    let Some(comm) = strads_ap::cluster::comm() else {
        println!(
            "{}",
            serde_json::json!({"check": "ok", "ranks": 1, "note": "a world of one: start it under `strads-ap run -n N`"})
        );
        return Ok(());
    };
    let (rank, world) = (comm.rank(), comm.world_size());
    if args.exit_rank == Some(rank) {
        eprintln!("strads-ap check: rank {rank} exits abruptly (--exit-rank)");
        std::process::exit(3);
    }
    if args.vanish_rank == Some(rank) {
        eprintln!("strads-ap check: rank {rank} exits with code 0 mid-job (--vanish-rank)");
        std::process::exit(0);
    }
    if args.leave_rank == Some(rank) {
        eprintln!("strads-ap check: rank {rank} leaves the job early (--leave-rank)");
        // Its goodbye wait ends when the others fail; it exits 0 whatever they do.
        let _ = strads_ap::finish();
        std::process::exit(0);
    }
    // Every rank reports itself; the sum proves every contribution arrived once.
    let sum = comm.allreduce(rank as u64 + 1, |a, b| a + b)?;
    let expected = (world as u64) * (world as u64 + 1) / 2;
    if sum != expected {
        return Err(strads_ap::Error::Config(format!(
            "allreduce gave {sum}, expected {expected}"
        )));
    }
    let members = comm.allgather((rank, std::process::id()))?;
    let t = Instant::now();
    for _ in 0..args.barriers {
        comm.barrier()?;
    }
    let barrier_us = t.elapsed().as_secs_f64() * 1e6 / args.barriers.max(1) as f64;
    let payload = vec![rank as u8; args.mib << 20];
    comm.barrier()?;
    let t = Instant::now();
    let got = comm.broadcast(0, payload)?;
    comm.barrier()?;
    let secs = t.elapsed().as_secs_f64();
    if got.len() != args.mib << 20 || got.iter().any(|&b| b != 0) {
        return Err(strads_ap::Error::Config(
            "the broadcast arrived damaged".into(),
        ));
    }
    if rank == 0 {
        println!(
            "{}",
            serde_json::json!({
                "check": "ok",
                "ranks": world,
                "sum": sum,
                "pids": members.iter().map(|m| m.1).collect::<Vec<_>>(),
                "join_secs": join_secs,
                "barrier_us": barrier_us,
                "broadcast_mib_per_s": (args.mib * (world - 1)) as f64 / secs,
            })
        );
    }
    strads_ap::finish()
}
