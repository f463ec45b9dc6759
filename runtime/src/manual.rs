//! The manual, generated from the clap definitions that also give
//! `--help`, so the two cannot drift: shell completions (`spillway
//! completions bash|zsh|fish`) and man pages (`spillway man`): `spillway(1)`
//! and one page per subcommand (`spillway-ctl(1)`, ...), each with its exit
//! status. The package installs what `spillway man --out DIR` and
//! `spillway completions` write (`.ci/deb.sh`).

use std::io::{self, Write};
use std::path::Path;

use clap::{Command, ValueEnum};
use clap_complete::Shell;
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;

use crate::ctl::{EXIT_DEGRADED, EXIT_NOT_ASKED, EXIT_OK, EXIT_REFUSED};

/// The shells `spillway completions` writes for.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

/// Write the completion script for `shell` to `out`.
pub fn completions(mut cmd: Command, shell: CompletionShell, out: &mut dyn Write) {
    let shell = match shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    clap_complete::generate(shell, &mut cmd, "spillway", out);
}

/// Every page: `spillway.1`, then `spillway-NAME.1` for each subcommand at
/// every depth (`spillway-ctl-health.1`, ...), as the SUBCOMMANDS sections
/// name them.
pub fn pages(cmd: &Command) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = without_help(cmd.clone());
    cmd.build();
    let mut out = Vec::new();
    add_pages(&cmd, "spillway", &mut out)?;
    Ok(out)
}

fn add_pages(cmd: &Command, name: &str, out: &mut Vec<(String, Vec<u8>)>) -> io::Result<()> {
    let named = cmd
        .clone()
        .name(name.to_string())
        .version(env!("CARGO_PKG_VERSION"));
    out.push((format!("{name}.1"), page(&named, name)?));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        add_pages(sub, &format!("{name}-{}", sub.get_name()), out)?;
    }
    Ok(())
}

/// The manual documents `--help`, not clap's `help` subcommands.
fn without_help(cmd: Command) -> Command {
    cmd.disable_help_subcommand(true)
        .mut_subcommands(without_help)
}

/// Write every page into `dir` (made if missing): the commands' pages
/// and `spillway.toml.5`, the configuration reference.
pub fn write_pages(cmd: &Command, dir: &Path) -> io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let mut names = Vec::new();
    let mut all = pages(cmd)?;
    all.push(("spillway.toml.5".into(), crate::reference::man_page()?));
    for (name, bytes) in all {
        std::fs::write(dir.join(&name), bytes)?;
        names.push(name);
    }
    Ok(names)
}

/// One page: clap_mangen's sections, then EXIT STATUS, FILES and SEE ALSO.
fn page(cmd: &Command, name: &str) -> io::Result<Vec<u8>> {
    let man = Man::new(cmd.clone()).title(name.to_uppercase());
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    man.render_description_section(&mut buf)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut buf)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut buf)?;
    }
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in exit_status(name) {
        roff.control("TP", []);
        roff.text([bold(code.to_string())]);
        roff.text([roman(meaning)]);
    }
    roff.control("SH", ["FILES"]);
    for (path, what) in FILES {
        roff.control("TP", []);
        roff.text([bold(*path)]);
        roff.text([roman(*what)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(
        "spillway(1), spillway-ctl(1), spillway-run(1), spillway-check(1), \
         spillway.toml(5); /usr/share/doc/spillway/",
    )]);
    roff.to_writer(&mut buf)?;
    man.render_version_section(&mut buf)?;
    Ok(buf)
}

/// The exit status of `spillway NAME` (or of `spillway` itself).
fn exit_status(name: &str) -> Vec<(u8, String)> {
    match name {
        n if n == "spillway-ctl" || n.starts_with("spillway-ctl-") => vec![
            (
                EXIT_OK,
                "Done. For health: ready (every shard takes writes, every sink delivers).".into(),
            ),
            (
                EXIT_REFUSED,
                "The daemon refused, and its reason is printed. For health: the daemon runs \
                 but is not ready (a shard cannot take writes, descriptors ran out; or, with \
                 admin.ready_requires_sinks, a sink is retrying, failed or stalled)."
                    .into(),
            ),
            (
                EXIT_NOT_ASKED,
                "The daemon could not be asked: not running, its admin socket missing, no \
                 answer within --timeout, or a wrong option or config. The same with --json."
                    .into(),
            ),
            (
                EXIT_DEGRADED,
                "For health only: ready (every shard takes writes) but degraded: a sink is \
                 retrying, failed or stalled. Its verdict line starts with `degraded:` and \
                 names each sink and why."
                    .into(),
            ),
        ],
        "spillway-run" => vec![
            (0, "The daemon stopped cleanly (SIGTERM, SIGINT).".into()),
            (
                1,
                "It could not start (the reason is printed once) or stopped on an error.".into(),
            ),
            (2, "Wrong options.".into()),
        ],
        "spillway-check" => vec![
            (
                0,
                "The daemon would start on this config (warnings may be printed).".into(),
            ),
            (1, "It would not: every reason is printed.".into()),
            (2, "Wrong options.".into()),
        ],
        _ => vec![
            (0, "Success.".into()),
            (1, "Failure: the reason is printed.".into()),
            (2, "Wrong options.".into()),
        ],
    }
}

/// The files every page lists (as the package installs them).
const FILES: &[(&str, &str)] = &[
    (
        "/etc/spillway/spillway.toml",
        "The configuration (a conffile: upgrades keep your edits).",
    ),
    (
        "/var/lib/spillway",
        "The data folder (server.data_dir): segments, checkpoints, dead letters.",
    ),
    (
        "/run/spillway",
        "The producer and admin sockets (server.socket_path, admin.socket_path).",
    ),
    (
        "/usr/lib/spillway/plugins",
        "The sink plugins the package ships (sink type \"plugin\").",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cli;
    use clap::CommandFactory;

    fn page_text(pages: &[(String, Vec<u8>)], name: &str) -> String {
        let (_, bytes) = pages
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no page {name}"));
        String::from_utf8(bytes.clone()).unwrap()
    }

    /// Every page a SUBCOMMANDS section names exists, and ctl's pages say
    /// what each exit status means, with the codes `ctl` exits with.
    #[test]
    fn every_page_named_exists_and_ctl_documents_its_exit_codes() {
        let pages = pages(&Cli::command()).unwrap();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        for want in [
            "spillway.1",
            "spillway-ctl.1",
            "spillway-ctl-health.1",
            "spillway-run.1",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("-help")), "{names:?}");
        let mut references = 0;
        for (name, bytes) in &pages {
            let text = String::from_utf8(bytes.clone()).unwrap();
            assert!(
                text.contains(".SH \"EXIT STATUS\"") || text.contains(".SH EXIT STATUS"),
                "{name}"
            );
            // Each reference like `spillway\-ctl\-health(1)` has its page.
            for (i, _) in text.match_indices("(1)") {
                let start = text[..i]
                    .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '\\'))
                    .map_or(0, |s| s + 1);
                let referenced = text[start..i].replace('\\', "");
                if referenced.starts_with("spillway") {
                    references += 1;
                    assert!(
                        names.contains(&format!("{referenced}.1").as_str()),
                        "{name} names {referenced}(1), which has no page"
                    );
                }
            }
        }
        assert!(
            references > pages.len(),
            "only {references} references checked"
        );
        let health = page_text(&pages, "spillway-ctl-health.1");
        for (code, word) in [
            (EXIT_OK, "ready"),
            (EXIT_REFUSED, "not ready"),
            (EXIT_NOT_ASKED, "could not be asked"),
            (EXIT_DEGRADED, "degraded"),
        ] {
            assert!(
                health.contains(&format!("\\fB{code}\\fR")),
                "exit {code}:\n{health}"
            );
            assert!(health.contains(word), "{word}:\n{health}");
        }
    }

    #[test]
    fn completions_name_every_subcommand() {
        for shell in [
            CompletionShell::Bash,
            CompletionShell::Zsh,
            CompletionShell::Fish,
        ] {
            let mut out = Vec::new();
            completions(Cli::command(), shell, &mut out);
            let text = String::from_utf8(out).unwrap();
            for sub in [
                "run",
                "check",
                "ctl",
                "push",
                "inspect",
                "completions",
                "health",
                "dead-letter",
            ] {
                assert!(text.contains(sub), "{shell:?} completion lacks {sub}");
            }
        }
    }
}
