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
use strads_ap_examples::cli;
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

    /// Passes over the data, at least 1 [default: the program's].
    #[arg(long, value_parser = cli::at_least_one)]
    epochs: Option<usize>,

    /// Worker threads of the strads-ap twin per process, 1 to 1024 [default:
    /// `STRADS_THREADS`, or all cores].
    #[arg(long, value_parser = cli::thread_count)]
    threads: Option<usize>,

    /// Seed of the data, the split and the initial parameters.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Real data instead of the synthetic default (programs that read data say which
    /// format in `--list`).
    #[arg(long, value_name = "PATH")]
    data: Option<PathBuf>,

    /// Multiplies the synthetic default's size (above 0, at most 1000).
    #[arg(long, default_value_t = 1.0, value_parser = scale)]
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
            if let Some(format) = p.reads {
                println!("{:<16} --data: {format}", "");
            }
        }
        return Ok(());
    }
    let program = zoo::program(args.program.as_deref().expect("clap requires it"))?;
    if let (Some(path), None) = (&args.data, program.reads) {
        let readers: Vec<&str> = PROGRAMS
            .iter()
            .filter(|p| p.reads.is_some())
            .map(|p| p.name)
            .collect();
        anyhow::bail!(
            "zoo {} reads no data (it runs on its synthetic data, sized by --scale), so \
             --data {} would be ignored; the programs that read data: {}",
            program.name,
            path.display(),
            readers.join(", ")
        );
    }
    let threads = cli::threads_or_default(args.threads);
    let run = Run {
        epochs: args.epochs,
        seed: args.seed,
        threads,
        data: args.data,
        scale: args.scale,
        verbose: !args.quiet,
        wait_for_plans: false,
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
    // A diverged program ends with an error, not a `null` in its result line.
    strads_ap::check_finite(&outcome.metric, outcome.value, outcome.epochs)?;
    print_json_line(&outcome);
    Ok(())
}

/// Parses `--scale`: a finite number above 0 and at most 1000 (the synthetic defaults are
/// sized for a minute's run; a thousand times that is hours and tens of gigabytes).
fn scale(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if !(x.is_finite() && x > 0.0 && x <= 1000.0) {
        return Err("must be a number above 0 and at most 1000".into());
    }
    Ok(x)
}
