//! Starting a rank on another host through ssh.
//!
//! ssh joins its arguments with spaces and hands the string to the remote user's shell, so
//! every word of the remote command is quoted for a POSIX shell here.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// Quotes `word` so that a POSIX shell reads it back as exactly one word with these bytes.
///
/// Words made only of characters no shell treats specially stay bare; anything else goes
/// inside single quotes, where a single quote is written `'\''`.
pub fn quote(word: &[u8]) -> Vec<u8> {
    let plain = |b: &u8| b.is_ascii_alphanumeric() || b"_-+=/.,:@%".contains(b);
    if !word.is_empty() && word.iter().all(plain) {
        return word.to_vec();
    }
    let mut quoted = Vec::with_capacity(word.len() + 2);
    quoted.push(b'\'');
    for &b in word {
        if b == b'\'' {
            quoted.extend_from_slice(b"'\\''");
        } else {
            quoted.push(b);
        }
    }
    quoted.push(b'\'');
    quoted
}

/// The command line the remote shell runs:
/// `cd CWD && exec env NAME=VALUE... PROGRAM ARGS...`, every word quoted.
pub fn remote_command(
    cwd: &Path,
    env: &[(&str, OsString)],
    program: &OsStr,
    args: &[OsString],
) -> OsString {
    let mut line = b"cd ".to_vec();
    line.extend(quote(cwd.as_os_str().as_bytes()));
    line.extend_from_slice(b" && exec env");
    for (name, value) in env {
        let mut assignment = format!("{name}=").into_bytes();
        assignment.extend_from_slice(value.as_bytes());
        line.push(b' ');
        line.extend(quote(&assignment));
    }
    for word in std::iter::once(program).chain(args.iter().map(OsString::as_os_str)) {
        line.push(b' ');
        line.extend(quote(word.as_bytes()));
    }
    OsString::from_vec(line)
}

/// The arguments of `ssh` that run `remote` on `host`: no password prompts (a rank that
/// cannot log in fails at once with ssh's exit code 255).
pub fn ssh_args(host: &str, remote: OsString) -> Vec<OsString> {
    vec!["-o".into(), "BatchMode=yes".into(), host.into(), remote]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn q(word: &str) -> String {
        String::from_utf8(quote(word.as_bytes())).unwrap()
    }

    #[test]
    fn quotes_only_what_needs_it() {
        assert_eq!(q("train"), "train");
        assert_eq!(q("./target/release/sgdmf"), "./target/release/sgdmf");
        assert_eq!(q("--lr=0.1"), "--lr=0.1");
        assert_eq!(q(""), "''");
        assert_eq!(q("two words"), "'two words'");
        assert_eq!(q("it's"), "'it'\\''s'");
        assert_eq!(q("$HOME"), "'$HOME'");
        assert_eq!(q("a;b|c&d>e"), "'a;b|c&d>e'");
    }

    #[test]
    fn a_shell_reads_quoted_words_back_unchanged() {
        let words: [&[u8]; 10] = [
            b"plain",
            b"",
            b"two words",
            b"it's",
            b"'''",
            b"$(touch /tmp/never) `id` $HOME",
            b"tab\tand\nnewline",
            b"back\\slash \"double\"",
            b"*?[glob]~",
            b"\xffnon-utf8",
        ];
        let mut script = b"printf '%s\\0'".to_vec();
        for word in words {
            script.push(b' ');
            script.extend(quote(word));
        }
        let output = Command::new("sh")
            .arg("-c")
            .arg(OsString::from_vec(script))
            .output()
            .unwrap();
        assert!(output.status.success());
        let back: Vec<&[u8]> = output.stdout.split(|&b| b == 0).collect();
        assert_eq!(back[..words.len()], words);
    }

    #[test]
    fn remote_command_changes_directory_sets_env_and_execs() {
        let env = [
            ("STRADS_RANK", OsString::from("2")),
            ("STRADS_OUTPUT_DIR", OsString::from("/home/me/my logs/j1")),
        ];
        let line = remote_command(
            Path::new("/home/me/proj"),
            &env,
            OsStr::new("./train"),
            &["--data".into(), "a b.csv".into()],
        );
        assert_eq!(
            line,
            "cd /home/me/proj && exec env STRADS_RANK=2 \
             'STRADS_OUTPUT_DIR=/home/me/my logs/j1' ./train --data 'a b.csv'"
        );
        assert_eq!(
            ssh_args("node3", line.clone()),
            [
                OsString::from("-o"),
                "BatchMode=yes".into(),
                "node3".into(),
                line
            ]
        );
    }
}
