//! What every scenario gets: the daemon under test, the launcher for
//! daemons of its own, the load plan and the repeat. Its own module so the
//! scenario list and the scenarios it lists (`e2e`, `hostile`) both use it
//! without importing each other.

use std::path::Path;

use super::daemon::Launcher;
use super::load::Plan;

/// What a scenario runs against.
pub struct Ctx<'a> {
    pub socket: &'a Path,
    /// The daemon's admin socket, when the bench started it (`ctl metrics`
    /// for sustained mode).
    pub admin_socket: Option<&'a Path>,
    /// The daemon's pid, when the bench started it (`None` with `--socket`).
    pub pid: Option<u32>,
    /// Starts further daemons (`None` with `--socket`).
    pub launcher: Option<&'a Launcher>,
    pub plan: Plan,
    /// Which repeat this is (0-based), for scenarios that alternate order.
    pub round: usize,
    /// How many repeats this scenario runs, for progress.
    pub repeats: usize,
    /// `--quick`: the end-to-end scenarios shorten their own fixed durations.
    pub quick: bool,
}
