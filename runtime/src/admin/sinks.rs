//! `ctl sink pause | resume | rewind NAME`: steering one sink's cursors.
//! Pause holds the sink on every shard (its backlog counts against the WAB
//! like a lagging sink's) and is remembered across restarts (a `paused`
//! file in its folder); rewind moves its cursors back over records the
//! shards still hold, so they are delivered to it (and only it) again.

use std::sync::Arc;

use spillway_actors::{CursorControl, RewindTo};

use super::AdminState;
use crate::sinks::set_paused_on_disk;

/// The controls of sink `name`'s cursors, one per shard.
fn cursors(state: &AdminState, name: &str) -> Result<Vec<Arc<CursorControl>>, String> {
    let sinks = state.board.sinks();
    match sinks.iter().find(|(n, _)| n == name) {
        Some((_, f)) => Ok(f.controls.clone()),
        None => Err(no_such_sink(name, sinks.iter().map(|(n, _)| n.as_str()))),
    }
}

/// Sink `name` delivers now, or why not (`ctl tap --sink` asks too).
pub(super) fn exists(state: &AdminState, name: &str) -> Result<(), String> {
    cursors(state, name).map(drop)
}

fn no_such_sink<'a>(name: &str, sinks: impl Iterator<Item = &'a str>) -> String {
    format!(
        "no sink {name:?}; sinks: {}",
        sinks.collect::<Vec<_>>().join(", ")
    )
}

/// `sink pause NAME` / `sink resume NAME`.
pub(super) fn pause(state: &AdminState, name: &str, paused: bool) -> Result<String, String> {
    let cursors = cursors(state, name)?;
    set_paused_on_disk(&state.data_dir, name, paused)?;
    for c in &cursors {
        c.set_paused(paused);
    }
    Ok(if paused {
        format!(
            "sink {name} paused on {} shards (its records are kept and count against wab_bytes_max; \
             `ctl sink resume {name}` delivers them)\n",
            cursors.len()
        )
    } else {
        format!("sink {name} resumed on {} shards\n", cursors.len())
    })
}

/// `sink rewind NAME --to oldest|SEQ [--shard N]`.
pub(super) fn rewind(
    state: &AdminState,
    name: &str,
    to: &str,
    shard: Option<&str>,
) -> Result<String, String> {
    let cursors = cursors(state, name)?;
    let to = match to {
        "oldest" => RewindTo::Oldest,
        seq => RewindTo::Seq(seq.parse().map_err(|_| {
            format!("--to {seq:?}: say oldest or a sequence number (see ctl segments)")
        })?),
    };
    let shards: Vec<usize> = match shard {
        None => (0..cursors.len()).collect(),
        Some(s) => {
            let n: usize = s
                .parse()
                .ok()
                .filter(|n| *n < cursors.len())
                .ok_or_else(|| format!("--shard {s:?}: the shards are 0..{}", cursors.len()))?;
            vec![n]
        }
    };
    if matches!(to, RewindTo::Seq(_)) && shard.is_none() && cursors.len() > 1 {
        return Err(
            "a sequence number belongs to one shard: say which with --shard N (or rewind to oldest)"
                .into(),
        );
    }
    for &i in &shards {
        cursors[i].request_rewind(to);
    }
    Ok(format!(
        "sink {name}: rewind to {} asked of {} shard(s); each cursor moves between batches \
         (never past the oldest record its shard still holds), see `ctl stats` for where it stands\n",
        match to {
            RewindTo::Oldest => "the oldest record held".to_string(),
            RewindTo::Seq(s) => format!("seq {s}"),
        },
        shards.len()
    ))
}
