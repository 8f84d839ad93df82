//! The conversion zoo: runs one serial textbook program or its strads-ap twin and prints
//! one JSON result line (see `strads_ap_examples::zoo` and `examples/zoo/README.md`).
//!
//! ```text
//! cargo build --release -p strads-ap-examples
//! target/release/zoo --list
//! target/release/zoo biased-mf --serial          # the serial program
//! target/release/zoo biased-mf --threads 2       # its strads-ap twin
//! target/release/bench --app zoo --program biased-mf --reps 3 --threads 2
//! ```

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use strads_ap_examples::report::print_json_line;
use strads_ap_examples::zoo::{self, Run, PROGRAMS};

/// Runs one program of the conversion zoo, serially or with strads-ap.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The program (see `--list`).
    #[arg(required_unless_present = "list")]
    program: Option<String>,

    /// Lists the programs and their shapes.
    #[arg(long)]
    list: bool,

    /// Runs the serial program instead of its strads-ap twin.
    #[arg(long)]
    serial: bool,

    /// Passes over the data [default: the program's].
    #[arg(long)]
    epochs: Option<usize>,

    /// Worker threads of the strads-ap twin per process [default: `STRADS_THREADS`, or
    /// all cores].
    #[arg(long)]
    threads: Option<usize>,

    /// Seed of the data, the split and the initial parameters.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Real data instead of the synthetic default (programs that read data say which
    /// format in `--list`).
    #[arg(long, value_name = "PATH")]
    data: Option<PathBuf>,

    /// Multiplies the synthetic default's size.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,

    /// Prints nothing per epoch.
    #[arg(long)]
    quiet: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.list {
        for p in PROGRAMS {
            println!("{:<16} {}", p.name, p.shape);
        }
        return Ok(());
    }
    let program = zoo::program(args.program.as_deref().expect("clap requires it"))?;
    anyhow::ensure!(
        args.scale > 0.0 && args.scale.is_finite(),
        "--scale must be a positive number"
    );
    let threads = args
        .threads
        .or_else(|| {
            std::env::var("STRADS_THREADS")
                .ok()
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let run = Run {
        epochs: args.epochs,
        seed: args.seed,
        threads,
        data: args.data,
        scale: args.scale,
        verbose: !args.quiet,
    };
    let outcome = if args.serial {
        (program.serial)(&run)?
    } else {
        strads_ap::init_with(strads_ap::Config::from_env()?.with_threads(threads))?;
        let outcome = (program.strads)(&run)?;
        if !args.quiet {
            strads_ap_examples::report::print_loop_stats();
        }
        strads_ap::finish()?;
        outcome
    };
    print_json_line(&outcome);
    Ok(())
}
