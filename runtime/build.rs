//! Sets `SPILLWAY_GIT_COMMIT` (the `git_commit` label of
//! `spillway_build_info`) to the commit the binary is built from: taken
//! from the environment when set (a build from a tarball can say it),
//! else from `git rev-parse HEAD`, else `unknown`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SPILLWAY_GIT_COMMIT");
    if let Ok(given) = std::env::var("SPILLWAY_GIT_COMMIT") {
        println!("cargo:rustc-env=SPILLWAY_GIT_COMMIT={given}");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = match git(&["rev-parse", "HEAD"]) {
        Some(commit) if !commit.is_empty() => {
            // Rebuilt when HEAD moves: HEAD itself and the branch it names
            // (only files that exist: cargo takes a missing one as changed,
            // and reran this and relinked the binary at every build).
            if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
                let dir = Path::new(&dir);
                let mut watched = vec![dir.join("HEAD"), dir.join("packed-refs")];
                if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                    watched.push(dir.join(branch));
                }
                for file in watched.iter().filter(|f| f.is_file()) {
                    println!("cargo:rerun-if-changed={}", file.display());
                }
            }
            commit
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=SPILLWAY_GIT_COMMIT={commit}");
}
