//! The group commit's answer to one ingest request, handed from the
//! flusher's thread to the request's task.

use std::sync::{Arc, Mutex};

use spillway_protocol::NackReason;
use tokio::sync::oneshot;

use crate::shard::CommitTarget;

/// Told once, by the flusher, whether the request's records are durable.
pub(super) struct Waiter(Mutex<Option<oneshot::Sender<Result<u64, NackReason>>>>);

impl Waiter {
    /// The target to put in the request's `AppendBatch`, and the answer to
    /// wait for (an error if the batch is dropped unanswered).
    pub(super) fn new() -> (Arc<Self>, oneshot::Receiver<Result<u64, NackReason>>) {
        let (tx, rx) = oneshot::channel();
        (Arc::new(Waiter(Mutex::new(Some(tx)))), rx)
    }
}

impl CommitTarget for Waiter {
    fn committed(&self, _token: u64, result: Result<u64, NackReason>) {
        if let Some(tx) = self.0.lock().unwrap().take() {
            // The client may have gone: nobody to tell, the records stay.
            let _ = tx.send(result);
        }
    }
}
