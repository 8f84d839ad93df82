//! Host files (`--hosts FILE`) and the placement of ranks on hosts.
//!
//! One host per line, `HOST` or `HOST slots=K`; `#` starts a comment; blank lines are
//! ignored. `HOST` is anything ssh accepts (`node3`, `user@node3`, an address).

use anyhow::{bail, Context, Result};
use std::path::Path;

/// One line of a host file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// What ssh is given.
    pub name: String,
    /// How many ranks the host takes per round (default 1).
    pub slots: usize,
}

/// Reads and parses a host file; errors name the file (and line).
pub fn read(path: &Path) -> Result<Vec<Host>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read hosts file {}", path.display()))?;
    parse(&path.display().to_string(), &text)
}

/// Parses the text of a host file; `file` names it in errors (`FILE:LINE: ...`).
pub fn parse(file: &str, text: &str) -> Result<Vec<Host>> {
    let mut hosts = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        let content = line.split('#').next().unwrap_or("");
        let mut words = content.split_whitespace();
        let Some(name) = words.next() else { continue };
        if name.starts_with('-') {
            bail!("{file}:{line_no}: host name {name:?} cannot start with '-'");
        }
        if name.contains('=') {
            bail!("{file}:{line_no}: expected a host name first, found {name:?}");
        }
        let mut slots = None;
        for word in words {
            let Some(value) = word.strip_prefix("slots=") else {
                bail!("{file}:{line_no}: unknown option {word:?}; a line is HOST or HOST slots=K");
            };
            if slots.is_some() {
                bail!("{file}:{line_no}: slots given twice");
            }
            match value.parse::<usize>() {
                Ok(k) if k >= 1 => slots = Some(k),
                _ => bail!(
                    "{file}:{line_no}: slots must be a whole number of at least 1, found {value:?}"
                ),
            }
        }
        hosts.push(Host {
            name: name.to_string(),
            slots: slots.unwrap_or(1),
        });
    }
    if hosts.is_empty() {
        bail!("{file}: no hosts (one per line: HOST or HOST slots=K)");
    }
    Ok(hosts)
}

/// The host of each rank `0..ranks`: hosts in file order, each taking `slots` ranks, and
/// round again from the first host when the ranks outnumber the slots.
pub fn assign(hosts: &[Host], ranks: usize) -> Vec<&str> {
    hosts
        .iter()
        .flat_map(|host| std::iter::repeat_n(host.name.as_str(), host.slots))
        .cycle()
        .take(ranks)
        .collect()
}

/// The host part of an ssh destination, as other ranks should dial it: `user@node3` →
/// `node3`; an IPv6 address is bracketed so that `:port` can follow.
pub fn dial_name(destination: &str) -> String {
    let host = destination.rsplit('@').next().unwrap_or(destination);
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, slots: usize) -> Host {
        Host {
            name: name.to_string(),
            slots,
        }
    }

    #[test]
    fn parses_hosts_slots_comments_and_blank_lines() {
        let text = "# cluster\n\nnode1\nnode2 slots=4   # big one\n  user@node3\tslots=2\n";
        let hosts = parse("h.txt", text).unwrap();
        assert_eq!(
            hosts,
            vec![host("node1", 1), host("node2", 4), host("user@node3", 2)]
        );
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let cases = [
            ("a\nb slot=2\n", "h.txt:2: unknown option \"slot=2\""),
            (
                "a slots=0\n",
                "h.txt:1: slots must be a whole number of at least 1, found \"0\"",
            ),
            ("a slots=x\n", "h.txt:1: slots must be"),
            ("\n\na slots=1 slots=2\n", "h.txt:3: slots given twice"),
            (
                "-oProxyCommand=x\n",
                "h.txt:1: host name \"-oProxyCommand=x\" cannot start",
            ),
            ("slots=2\n", "h.txt:1: expected a host name first"),
            ("# nothing\n\n", "h.txt: no hosts"),
        ];
        for (text, expected) in cases {
            let message = parse("h.txt", text).unwrap_err().to_string();
            assert!(message.starts_with(expected), "{text:?}: {message}");
        }
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let message = format!("{:#}", read(Path::new("/no/such/hosts")).unwrap_err());
        assert!(
            message.starts_with("cannot read hosts file /no/such/hosts: "),
            "{message}"
        );
    }

    #[test]
    fn ranks_fill_slots_in_order_and_cycle() {
        let hosts = [host("a", 2), host("b", 1)];
        assert_eq!(assign(&hosts, 2), ["a", "a"]);
        assert_eq!(assign(&hosts, 3), ["a", "a", "b"]);
        assert_eq!(assign(&hosts, 7), ["a", "a", "b", "a", "a", "b", "a"]);
        assert_eq!(assign(&[host("x", 1)], 3), ["x", "x", "x"]);
    }

    #[test]
    fn dial_name_drops_the_user_and_brackets_ipv6() {
        assert_eq!(dial_name("node3"), "node3");
        assert_eq!(dial_name("alice@node3"), "node3");
        assert_eq!(dial_name("::1"), "[::1]");
        assert_eq!(dial_name("bob@fe80::2"), "[fe80::2]");
    }
}
