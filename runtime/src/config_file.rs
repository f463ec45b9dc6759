//! Which config file a command uses when `--config` is not given: the
//! file `$SPILLWAY_CONFIG` names, else `./spillway.toml`, else the
//! package's `/etc/spillway/spillway.toml`, else the embedded default. So
//! `spillway ctl health` on a host where the package is installed finds
//! the daemon's admin socket without flags. `-v` says which one and why.

use std::path::{Path, PathBuf};

use spillway::config::ConfigError;

use crate::logging;
use crate::Command;

/// The environment variable naming the config file.
pub const ENV: &str = "SPILLWAY_CONFIG";
/// The file looked for in the current folder.
pub const LOCAL: &str = "spillway.toml";
/// The package's config.
pub const SYSTEM: &str = "/etc/spillway/spillway.toml";

/// Fills in the config of `command` when it takes one and none was given
/// (nor a socket that makes it unneeded); with `verbose`, says on stderr
/// which file it uses and why.
pub fn resolve_for(command: &mut Command, verbose: bool) -> Result<(), String> {
    let slot = match command {
        Command::Run { config, .. } | Command::Check { config, .. } => config,
        Command::Ctl {
            config,
            admin_socket: None,
            ..
        } => config,
        Command::Push(args) if args.socket.is_none() => &mut args.config,
        _ => return Ok(()),
    };
    let (path, why) = match slot.take() {
        Some(p) => (Some(p), "given with --config".to_string()),
        None => find(std::env::var_os(ENV).map(PathBuf::from), Path::new(SYSTEM))?,
    };
    if verbose {
        let which = path
            .as_deref()
            .map_or("the embedded default".to_string(), |p| {
                p.display().to_string()
            });
        logging::say_err(&format!("spillway: config: {which} ({why})"));
    }
    *slot = path;
    Ok(())
}

/// The config file without `--config`: `env` (the variable's value; an
/// empty one counts as unset), `./spillway.toml`, `system`, or none (the
/// embedded default); and why that one.
fn find(env: Option<PathBuf>, system: &Path) -> Result<(Option<PathBuf>, String), String> {
    if let Some(p) = env.filter(|p| !p.as_os_str().is_empty()) {
        if !p.exists() {
            return Err(format!(
                "{ENV}={}: no such file (unset it to use ./{LOCAL}, {SYSTEM} or the embedded \
                 default)",
                p.display()
            ));
        }
        return Ok((Some(p), format!("from ${ENV}")));
    }
    if Path::new(LOCAL).exists() {
        return Ok((
            Some(PathBuf::from(LOCAL)),
            format!("./{LOCAL} in the current folder; ${ENV} is unset"),
        ));
    }
    if system.exists() {
        return Ok((
            Some(system.to_path_buf()),
            format!("${ENV} is unset and there is no ./{LOCAL}"),
        ));
    }
    Ok((
        None,
        format!(
            "no --config, ${ENV} unset, no ./{LOCAL}, no {}",
            system.display()
        ),
    ))
}

/// A config that did not load, said; a file the caller may not read also
/// says who may (its owner, group and mode) and what to do.
pub fn explain_load_error(e: ConfigError) -> String {
    match &e {
        ConfigError::Read { path, source }
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            let owner = std::fs::metadata(path).map_or(String::new(), |m| {
                use std::os::unix::fs::MetadataExt;
                format!(
                    " (owned by {}, group {}, mode {:04o}: join that group, or run as root)",
                    spillway_ctl::access::user_name(m.uid()),
                    spillway_ctl::access::group_name(m.gid()),
                    m.mode() & 0o7777
                )
            });
            format!("{e}{owner}")
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_wins_and_must_name_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let system = dir.path().join("system.toml");
        let mine = dir.path().join("mine.toml");
        std::fs::write(&mine, "").unwrap();
        let (p, why) = find(Some(mine.clone()), &system).unwrap();
        assert_eq!(p, Some(mine));
        assert!(why.contains("$SPILLWAY_CONFIG"), "{why}");
        let gone = dir.path().join("gone.toml");
        let e = find(Some(gone.clone()), &system).unwrap_err();
        assert!(
            e.contains(&gone.display().to_string()) && e.contains("no such file"),
            "{e}"
        );
    }

    #[test]
    fn the_system_file_then_the_embedded_default() {
        // (The test's current folder is the crate's, which has no
        // spillway.toml.)
        assert!(!Path::new(LOCAL).exists());
        let dir = tempfile::tempdir().unwrap();
        let system = dir.path().join("system.toml");
        let (p, why) = find(Some(PathBuf::new()), &system).unwrap();
        assert_eq!(p, None, "an empty variable counts as unset");
        assert!(why.contains("no ./spillway.toml"), "{why}");
        std::fs::write(&system, "").unwrap();
        assert_eq!(find(None, &system).unwrap().0, Some(system));
    }
}
