//! Running inside a Slurm allocation: one `srun` starts every rank.

use anyhow::{bail, Result};
use std::ffi::OsString;

/// The variable Slurm sets to the allocation's nodes, e.g. `node[01-03,07],gpu5`.
pub const NODELIST: &str = "SLURM_JOB_NODELIST";

/// The first node of a Slurm node list, in Slurm's compressed form:
/// `node[01-03,07],gpu5` → `node01`, `rack[2-3]-n[4,9]` → `rack2-n4`.
///
/// Slurm starts task 0 on the first node of the allocation, so it is the rendezvous host.
pub fn first_node(list: &str) -> Result<String> {
    let mut node = String::new();
    let mut chars = list.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                let mut first = String::new();
                let mut in_first = true;
                let mut closed = false;
                for c in chars.by_ref() {
                    match c {
                        ']' => {
                            closed = true;
                            break;
                        }
                        ',' | '-' => in_first = false,
                        c if c.is_ascii_digit() => {
                            if in_first {
                                first.push(c);
                            }
                        }
                        c => bail!("bad Slurm node list {list:?}: unexpected {c:?} in brackets"),
                    }
                }
                if !closed || first.is_empty() {
                    bail!("bad Slurm node list {list:?}: unbalanced or empty brackets");
                }
                node.push_str(&first);
            }
            ']' => bail!("bad Slurm node list {list:?}: ']' without '['"),
            c => node.push(c),
        }
    }
    if node.is_empty() {
        bail!("bad Slurm node list {list:?}: no node");
    }
    Ok(node)
}

/// The arguments of `srun` that start `ranks` tasks of `program args`; Slurm kills the
/// whole step when one task fails.
pub fn srun_args(
    ranks: usize,
    threads: Option<usize>,
    program: &OsString,
    args: &[OsString],
) -> Vec<OsString> {
    let mut srun = vec![
        OsString::from(format!("--ntasks={ranks}")),
        "--kill-on-bad-exit=1".into(),
    ];
    if let Some(threads) = threads {
        srun.push(format!("--cpus-per-task={threads}").into());
    }
    srun.push(program.clone());
    srun.extend(args.iter().cloned());
    srun
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_node_of_compressed_lists() {
        assert_eq!(first_node("node[01-03,07],gpu5").unwrap(), "node01");
        assert_eq!(first_node("gpu5,node[01-03]").unwrap(), "gpu5");
        assert_eq!(first_node("node7").unwrap(), "node7");
        assert_eq!(first_node("n[3,1-2]").unwrap(), "n3");
        assert_eq!(first_node("rack[2-3]-n[004-009]").unwrap(), "rack2-n004");
        assert_eq!(first_node(" c1.example.org ").unwrap(), "c1.example.org");
    }

    #[test]
    fn malformed_lists_are_errors() {
        for bad in ["", ",node1", "node[01-03", "node[]", "node]1", "node[a-b]"] {
            let message = first_node(bad).unwrap_err().to_string();
            assert!(
                message.starts_with("bad Slurm node list"),
                "{bad:?}: {message}"
            );
        }
    }

    #[test]
    fn srun_command() {
        let program = OsString::from("./train");
        let args = [OsString::from("--epochs"), OsString::from("3")];
        assert_eq!(
            srun_args(4, Some(8), &program, &args),
            [
                "--ntasks=4",
                "--kill-on-bad-exit=1",
                "--cpus-per-task=8",
                "./train",
                "--epochs",
                "3"
            ]
        );
        assert_eq!(
            srun_args(2, None, &program, &[]),
            ["--ntasks=2", "--kill-on-bad-exit=1", "./train"]
        );
    }
}
