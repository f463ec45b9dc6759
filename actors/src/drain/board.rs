//! What the admin side reads of delivery: every configured sink's figures,
//! one [`DrainStats`] per shard (and the operator's [`CursorControl`] of
//! each), and each shard's retention figures. The
//! daemon fills it at start, a reload adds and removes sinks, and `ctl
//! stats`, `ctl health`, `/ready` and `/metrics` read it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use super::{CursorControl, DrainStats, RetentionStats};

/// One sink's figures.
#[derive(Debug, Clone)]
pub struct SinkFigures {
    /// Its type and target (`http http://...`), for people.
    pub description: String,
    /// Its delivery from each shard, by shard number.
    pub shards: Vec<Arc<DrainStats>>,
    /// The operator's controls of its cursor in each shard, by shard
    /// number (`ctl sink pause | resume | rewind`).
    pub controls: Vec<Arc<CursorControl>>,
}

/// Every sink's figures and every shard's retention.
#[derive(Debug, Default)]
pub struct DeliveryBoard {
    sinks: RwLock<BTreeMap<String, SinkFigures>>,
    /// Each shard's retention figures, by shard number.
    pub retention: Vec<Arc<RetentionStats>>,
}

impl DeliveryBoard {
    pub fn new(retention: Vec<Arc<RetentionStats>>) -> Self {
        DeliveryBoard {
            sinks: RwLock::default(),
            retention,
        }
    }

    /// A sink starts delivering (or its figures are replaced).
    pub fn insert(&self, sink: &str, figures: SinkFigures) {
        self.sinks
            .write()
            .unwrap()
            .insert(sink.to_string(), figures);
    }

    /// A sink was removed from the config.
    pub fn remove(&self, sink: &str) {
        self.sinks.write().unwrap().remove(sink);
    }

    /// A sink was changed by a reload.
    pub fn describe(&self, sink: &str, description: &str) {
        if let Some(f) = self.sinks.write().unwrap().get_mut(sink) {
            f.description = description.to_string();
        }
    }

    /// Every sink, by name.
    pub fn sinks(&self) -> Vec<(String, SinkFigures)> {
        self.sinks
            .read()
            .unwrap()
            .iter()
            .map(|(n, f)| (n.clone(), f.clone()))
            .collect()
    }

    /// Shard `shard`'s figures of every sink, by sink name.
    pub fn shard(&self, shard: usize) -> Vec<(String, Arc<DrainStats>)> {
        self.sinks
            .read()
            .unwrap()
            .iter()
            .filter_map(|(n, f)| Some((n.clone(), f.shards.get(shard)?.clone())))
            .collect()
    }
}
