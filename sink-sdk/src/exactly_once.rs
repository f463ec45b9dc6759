//! Exactly once into a downstream with transactions: [`ExactlyOnce`] turns
//! a [`Transactions`] (begin, write, commit or abort, read back a
//! position) into a [`Sink`](crate::Sink) whose downstream holds every
//! record once, across retries, crashes and restarts.
//!
//! Each batch is one transaction that writes the batch's records and the
//! shard's new [`Position`] (the last seq the transaction covered, and the
//! records of it the downstream refused for good) together. Whenever the
//! transactions are opened (the first delivery, and again after a commit
//! whose end is not known), the position is read back: what it covers is
//! confirmed without being written again, whatever the local checkpoint
//! says. So a crash between the commit and the checkpoint, a fenced
//! producer, or a commit that timed out after it took effect costs no
//! duplicate; and a record refused for good is dead-lettered even when
//! the answer that said so was lost in a crash.
//!
//! The shard must deliver one batch at a time (`batches_in_flight = 1`):
//! the position is then exact.
//!
//! spillway's Kafka sink is one; the simulation (testing/sim) runs the
//! same adapter over a modelled downstream.

use crate::{Batch, Outcome, Record, RecordOutcome};

/// What one committed transaction says about its shard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    /// The last seq the transaction covered (written or refused).
    pub seq: u64,
    /// Records of that transaction the downstream refused for good, with
    /// why.
    pub refused: Vec<(u64, String)>,
}

impl Position {
    /// Why `seq` was refused, if the transaction refused it.
    pub fn refusal(&self, seq: u64) -> Option<&str> {
        self.refused
            .iter()
            .find(|(s, _)| *s == seq)
            .map(|(_, why)| why.as_str())
    }
}

/// How one transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Txn {
    /// Committed: every record given is downstream, with the position.
    Committed,
    /// Aborted because the downstream refused these records (indexes into
    /// the records given) for good; nothing of it is downstream.
    Refused(Vec<(usize, String)>),
    /// Aborted: nothing of it is downstream. The batch is retried.
    Aborted(String),
    /// Its end is not known (a fenced producer, a commit that did not
    /// answer): the transactions are opened again, which ends it, and the
    /// position read back says whether it committed.
    Unknown(String),
}

/// What [`ExactlyOnce`] tells its downstream's owner, to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resumed {
    /// The position read back: records up to `seq` are confirmed without
    /// being written again.
    After { seq: u64 },
    /// No position (a first start, or the positions were lost): delivery
    /// resumes from the local checkpoint.
    NoPosition,
    /// The position read back is behind the first record offered: records
    /// `from..=to` were confirmed by the local checkpoint (written,
    /// dead-lettered or skipped) and are not written again.
    Behind { seq: u64, from: u64, to: u64 },
}

/// A downstream with transactions, for one shard.
pub trait Transactions {
    /// Makes ready to write: ends (fences) every earlier writer of this
    /// shard and its open transaction, then reads the shard's committed
    /// position back.
    fn open(&mut self) -> Result<Option<Position>, String>;

    /// One transaction: `records` and `position`, committed together or
    /// not at all.
    fn transact(&mut self, records: &[&Record<'_>], position: &Position) -> Txn;

    /// Forgets the writer: the next [`open`](Self::open) starts afresh.
    fn close(&mut self);

    /// Hears how delivery resumed after an [`open`](Self::open).
    fn resumed(&mut self, how: Resumed) {
        let _ = how;
    }
}

/// A [`Transactions`] delivering batches exactly once.
pub struct ExactlyOnce<T> {
    inner: T,
    open: bool,
    /// The last committed position: read back at an open, kept by each
    /// commit.
    committed: Option<Position>,
    /// Opened since the last batch: the next one is compared with the
    /// position read back.
    fresh: bool,
}

impl<T: Transactions> ExactlyOnce<T> {
    pub fn new(inner: T) -> ExactlyOnce<T> {
        ExactlyOnce {
            inner,
            open: false,
            committed: None,
            fresh: false,
        }
    }

    pub fn inner(&self) -> &T {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    fn close(&mut self) {
        self.inner.close();
        self.open = false;
        self.committed = None;
    }

    fn ensure_open(&mut self) -> Result<(), String> {
        if self.open {
            return Ok(());
        }
        match self.inner.open() {
            Ok(committed) => {
                self.inner.resumed(match &committed {
                    Some(p) => Resumed::After { seq: p.seq },
                    None => Resumed::NoPosition,
                });
                self.committed = committed;
                self.open = true;
                self.fresh = true;
                Ok(())
            }
            Err(reason) => {
                self.close();
                Err(reason)
            }
        }
    }

    /// Delivers one batch: one transaction (again without what the
    /// downstream refused for good, until one commits or fails).
    pub fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        let records = batch.records();
        let Some(last) = records.last().map(|r| r.seq) else {
            return Outcome::Committed;
        };
        if let Err(reason) = self.ensure_open() {
            return Outcome::Retry {
                after: None,
                reason,
            };
        }
        if std::mem::take(&mut self.fresh) {
            if let Some(p) = &self.committed {
                let first = records[0].seq;
                if first > p.seq + 1 {
                    self.inner.resumed(Resumed::Behind {
                        seq: p.seq,
                        from: p.seq + 1,
                        to: first - 1,
                    });
                }
            }
        }
        // What the last committed transaction covered is downstream (or
        // was refused there): confirmed without being written again.
        let covered = |r: &Record<'_>, p: Option<&Position>| p.is_some_and(|p| r.seq <= p.seq);
        let mut outcomes: Vec<Option<RecordOutcome>> = records
            .iter()
            .map(|r| {
                let p = self.committed.as_ref()?;
                covered(r, Some(p)).then(|| match p.refusal(r.seq) {
                    Some(why) => RecordOutcome::Rejected(why.to_string()),
                    None => RecordOutcome::Committed,
                })
            })
            .collect();
        // Each round that does not end it refuses at least one record.
        for _ in 0..=records.len() {
            let pending: Vec<usize> = (0..records.len())
                .filter(|&i| outcomes[i].is_none())
                .collect();
            if pending.is_empty() {
                break;
            }
            // Every refusal of this batch, the ones an earlier position
            // carried too: the drain confirms none of them before this
            // batch's answer, so a restart must find them all again.
            let refused: Vec<(u64, String)> = outcomes
                .iter()
                .zip(records)
                .filter_map(|(o, r)| match o {
                    Some(RecordOutcome::Rejected(why)) => Some((r.seq, why.clone())),
                    _ => None,
                })
                .collect();
            let position = Position { seq: last, refused };
            let sent: Vec<&Record<'_>> = pending.iter().map(|&i| &records[i]).collect();
            match self.inner.transact(&sent, &position) {
                Txn::Committed => {
                    for &i in &pending {
                        outcomes[i] = Some(RecordOutcome::Committed);
                    }
                    self.committed = Some(position);
                    break;
                }
                Txn::Refused(refusals) if !refusals.is_empty() => {
                    for (k, why) in refusals {
                        if let Some(&i) = pending.get(k) {
                            outcomes[i] = Some(RecordOutcome::Rejected(why));
                        }
                    }
                }
                Txn::Refused(_) => {
                    return self.retry(outcomes, records, "the transaction was aborted".into())
                }
                Txn::Aborted(reason) => return self.retry(outcomes, records, reason),
                Txn::Unknown(reason) => {
                    self.close();
                    return self.retry(outcomes, records, reason);
                }
            }
        }
        let outcomes: Vec<RecordOutcome> = outcomes
            .into_iter()
            .map(|o| o.unwrap_or(RecordOutcome::Retry))
            .collect();
        if outcomes.iter().all(|o| *o == RecordOutcome::Committed) {
            Outcome::Committed
        } else {
            Outcome::Split(outcomes)
        }
    }

    /// A batch whose transaction did not commit: what the committed
    /// position covers keeps its outcome, the rest is offered again (a
    /// refusal found in an aborted round is found again then).
    fn retry(
        &self,
        outcomes: Vec<Option<RecordOutcome>>,
        records: &[Record<'_>],
        reason: String,
    ) -> Outcome {
        let committed = self.committed.as_ref();
        let outcomes: Vec<RecordOutcome> = outcomes
            .into_iter()
            .zip(records)
            .map(|(o, r)| match o {
                Some(o) if committed.is_some_and(|p| r.seq <= p.seq) => o,
                _ => RecordOutcome::Retry,
            })
            .collect();
        if outcomes.first() == Some(&RecordOutcome::Retry) {
            Outcome::Retry {
                after: None,
                reason,
            }
        } else {
            Outcome::Split(outcomes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A downstream in memory: what is committed, the position per shard,
    /// and the answers to give, in turn.
    #[derive(Default)]
    struct Store {
        committed: Vec<u64>,
        position: Option<Position>,
        answers: Vec<Answer>,
        opens: usize,
        events: Vec<Resumed>,
    }

    #[derive(Clone)]
    enum Answer {
        Commit,
        /// Refuse the records whose seq is in the list.
        Refuse(Vec<u64>),
        Abort,
        /// Commit, then say nothing is known.
        CommitUnknown,
        /// Do not commit, and say nothing is known.
        LostUnknown,
    }

    impl Transactions for Store {
        fn open(&mut self) -> Result<Option<Position>, String> {
            self.opens += 1;
            Ok(self.position.clone())
        }

        fn transact(&mut self, records: &[&Record<'_>], position: &Position) -> Txn {
            let answer = if self.answers.is_empty() {
                Answer::Commit
            } else {
                self.answers.remove(0)
            };
            let commit = |s: &mut Store| {
                s.committed.extend(records.iter().map(|r| r.seq));
                s.position = Some(position.clone());
            };
            match answer {
                Answer::Commit => {
                    commit(self);
                    Txn::Committed
                }
                Answer::Refuse(seqs) => {
                    let refusals: Vec<(usize, String)> = records
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| seqs.contains(&r.seq))
                        .map(|(i, r)| (i, format!("too large: {}", r.seq)))
                        .collect();
                    if refusals.is_empty() {
                        commit(self);
                        Txn::Committed
                    } else {
                        Txn::Refused(refusals)
                    }
                }
                Answer::Abort => Txn::Aborted("broker down".into()),
                Answer::CommitUnknown => {
                    commit(self);
                    Txn::Unknown("commit timed out".into())
                }
                Answer::LostUnknown => Txn::Unknown("fenced".into()),
            }
        }

        fn close(&mut self) {}

        fn resumed(&mut self, how: Resumed) {
            self.events.push(how);
        }
    }

    fn records(seqs: std::ops::RangeInclusive<u64>) -> Vec<Record<'static>> {
        seqs.map(|seq| Record {
            shard: 0,
            seq,
            tier: 1,
            arrival_unix_us: 0,
            payload: b"x",
        })
        .collect()
    }

    fn deliver(s: &mut ExactlyOnce<Store>, seqs: std::ops::RangeInclusive<u64>) -> Outcome {
        let r = records(seqs);
        s.deliver(&Batch::new(0, &r))
    }

    #[test]
    fn a_commit_whose_answer_was_lost_is_not_written_again() {
        let mut s = ExactlyOnce::new(Store::default());
        s.inner_mut().answers = vec![Answer::CommitUnknown];
        assert!(matches!(deliver(&mut s, 1..=3), Outcome::Retry { .. }));
        // Offered again: opened again, the position covers it.
        assert_eq!(deliver(&mut s, 1..=3), Outcome::Committed);
        assert_eq!(s.inner().committed, vec![1, 2, 3]);
        assert_eq!(s.inner().opens, 2);
        // Offered again with more: only the new records are written.
        s.inner_mut().answers = vec![Answer::LostUnknown];
        assert!(matches!(deliver(&mut s, 4..=6), Outcome::Retry { .. }));
        assert_eq!(deliver(&mut s, 4..=6), Outcome::Committed);
        assert_eq!(s.inner().committed, vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn refused_records_are_dead_lettered_even_after_a_restart() {
        let mut s = ExactlyOnce::new(Store::default());
        s.inner_mut().answers = vec![Answer::Refuse(vec![2]), Answer::Commit];
        let out = deliver(&mut s, 1..=3);
        let Outcome::Split(o) = out else {
            panic!("{out:?}")
        };
        assert_eq!(o[0], RecordOutcome::Committed);
        assert!(matches!(&o[1], RecordOutcome::Rejected(w) if w == "too large: 2"));
        assert_eq!(o[2], RecordOutcome::Committed);
        assert_eq!(s.inner().committed, vec![1, 3]);
        // A restart before the checkpoint: the same batch, a new adapter
        // over the same downstream. Nothing is written again, and record 2
        // is refused again from the position.
        let mut store = std::mem::take(s.inner_mut());
        store.events.clear();
        let mut again = ExactlyOnce::new(store);
        let Outcome::Split(o) = deliver(&mut again, 1..=3) else {
            panic!()
        };
        assert!(matches!(&o[1], RecordOutcome::Rejected(w) if w == "too large: 2"));
        assert_eq!(again.inner().committed, vec![1, 3]);
        assert_eq!(again.inner().events, vec![Resumed::After { seq: 3 }]);
        // Offered again with more records (the dead letter not yet
        // written): the new position still carries record 2's refusal, so
        // another restart refuses it again rather than calling it written.
        assert!(matches!(deliver(&mut again, 1..=5), Outcome::Split(_)));
        let mut store = std::mem::take(again.inner_mut());
        store.events.clear();
        let mut third = ExactlyOnce::new(store);
        let Outcome::Split(o) = deliver(&mut third, 1..=5) else {
            panic!()
        };
        assert!(matches!(&o[1], RecordOutcome::Rejected(w) if w == "too large: 2"));
        assert_eq!(third.inner().committed, vec![1, 3, 4, 5]);
    }

    #[test]
    fn an_abort_retries_the_batch_and_a_position_behind_is_told() {
        let mut s = ExactlyOnce::new(Store {
            position: Some(Position {
                seq: 2,
                refused: vec![],
            }),
            answers: vec![Answer::Abort],
            ..Store::default()
        });
        assert!(matches!(deliver(&mut s, 5..=6), Outcome::Retry { .. }));
        assert_eq!(
            s.inner().events,
            vec![
                Resumed::After { seq: 2 },
                Resumed::Behind {
                    seq: 2,
                    from: 3,
                    to: 4
                }
            ]
        );
        assert_eq!(deliver(&mut s, 5..=6), Outcome::Committed);
        assert_eq!(s.inner().committed, vec![5, 6]);
        // A batch partly covered by a position read back, then aborted:
        // the covered head stays committed, the rest is retried.
        let store = std::mem::take(s.inner_mut());
        let mut again = ExactlyOnce::new(Store {
            answers: vec![Answer::Abort],
            ..store
        });
        assert_eq!(
            deliver(&mut again, 5..=8),
            Outcome::Split(vec![
                RecordOutcome::Committed,
                RecordOutcome::Committed,
                RecordOutcome::Retry,
                RecordOutcome::Retry
            ])
        );
    }
}
