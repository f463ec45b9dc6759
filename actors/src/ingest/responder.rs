//! The response side of one connection: its in-order response slots, its
//! unwritten bytes and its in-flight window, shared between the
//! [`crate::Connection`] actor and the flusher threads that commit its
//! batches.
//!
//! When a group commit returns, the flusher thread marks the connection's
//! slots answered and writes the ready prefix of responses straight to the
//! socket (non-blocking). The connection's arbiter thread is woken only when
//! it has something to do: the socket is full, it paused reading at its
//! window, or it is closing. On this VM an idle core takes ~40-50 µs to wake,
//! and every Sync ack used to pay one such wake for the arbiter.
//!
//! Safety of the shared descriptor: the flusher writes to the socket only
//! while holding the lock and only while `closed` is false; the actor sets
//! `closed` under the lock before its socket halves are dropped, so a
//! descriptor number is never written to after it was closed (and perhaps
//! reused).

use std::collections::VecDeque;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};

use actix::prelude::*;
use bytes::{Buf, BytesMut};
use spillway_protocol::{encode_response, NackReason, Response};

use crate::shard::CommitTarget;
use crate::stats::DaemonStats;

/// One response slot, kept in request order.
#[derive(Debug)]
pub(crate) enum Slot {
    /// Records queued for a group commit, answered by `committed(token)`.
    Waiting {
        token: u64,
        records: usize,
        bytes: u64,
        batch: bool,
    },
    Ready(Response),
}

/// Sent to the connection actor when the flusher's commit needs it: the
/// socket would block, its window freed while it was paused, or it is
/// closing and may now be done.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Progress;

/// State behind the lock.
pub(crate) struct State {
    pub slots: VecDeque<Slot>,
    /// Encoded responses not yet written.
    pub out: BytesMut,
    pub inflight_records: usize,
    pub inflight_bytes: u64,
    /// The socket is closed or about to be: never touch the descriptor.
    pub closed: bool,
    /// The actor is waiting for the socket to accept `out`: only it writes
    /// until then (writes must stay in order).
    pub writing_async: bool,
    /// The actor paused reading (window, closing, peer gone) and wants a
    /// [`Progress`] when slots are answered.
    pub wants_progress: bool,
    /// A direct write failed (peer gone); the actor closes.
    pub write_failed: bool,
}

impl State {
    /// Encode the answered prefix of slots into `out`.
    pub fn encode_ready(&mut self) {
        while let Some(Slot::Ready(resp)) = self.slots.front() {
            encode_response(*resp, &mut self.out);
            self.slots.pop_front();
        }
    }
}

pub struct Responder {
    state: Mutex<State>,
    /// The socket the flusher writes acks to directly; `None` for a TLS
    /// stream (only the connection writes it: see [`crate::ingest::transport`]).
    fd: Option<RawFd>,
    actor: Mutex<Option<Recipient<Progress>>>,
    stats: Arc<DaemonStats>,
}

impl Responder {
    pub(crate) fn new(fd: Option<RawFd>, stats: Arc<DaemonStats>) -> Arc<Self> {
        Arc::new(Responder {
            state: Mutex::new(State {
                slots: VecDeque::new(),
                // Grows with the first acks; an idle connection holds none.
                out: BytesMut::new(),
                inflight_records: 0,
                inflight_bytes: 0,
                closed: false,
                writing_async: false,
                wants_progress: false,
                write_failed: false,
            }),
            fd,
            actor: Mutex::new(None),
            stats,
        })
    }

    pub(crate) fn set_actor(&self, actor: Recipient<Progress>) {
        *self.actor.lock().unwrap() = Some(actor);
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// No frame waits for its answer and no answer waits to be written:
    /// closing the connection now loses its producer nothing.
    pub(crate) fn nothing_in_flight(&self) -> bool {
        let st = self.lock();
        st.slots.is_empty() && st.out.is_empty() && !st.writing_async && !st.closed
    }

    /// Write as much of `out` as the socket takes now, without blocking.
    /// Only called with the lock held and `closed == false`.
    pub(crate) fn write_now(&self, st: &mut State) {
        let Some(fd) = self.fd else {
            return; // TLS: the connection writes (through rustls)
        };
        while !st.out.is_empty() {
            // SAFETY: `fd` is open while `closed` is false (see module docs);
            // the buffer is valid for `len` bytes. MSG_NOSIGNAL: a vanished
            // peer is an error here, not a SIGPIPE.
            let n = unsafe {
                libc::send(
                    fd,
                    st.out.as_ptr() as *const libc::c_void,
                    st.out.len(),
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            if n >= 0 {
                st.out.advance(n as usize);
                continue;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return,
                _ => {
                    st.write_failed = true;
                    return;
                }
            }
        }
    }

    fn notify_actor(&self) {
        if let Some(actor) = self.actor.lock().unwrap().as_ref() {
            actor.do_send(Progress);
        }
    }
}

impl CommitTarget for Responder {
    fn committed(&self, token: u64, result: Result<u64, NackReason>) {
        let mut st = self.lock();
        if st.closed {
            return;
        }
        for i in 0..st.slots.len() {
            let Slot::Waiting {
                token: t,
                records,
                bytes,
                batch,
            } = st.slots[i]
            else {
                continue;
            };
            if t != token {
                continue;
            }
            st.inflight_records -= records;
            st.inflight_bytes -= bytes;
            st.slots[i] = Slot::Ready(match result {
                Ok(_) if batch => Response::AckBatch {
                    count: records as u32,
                },
                Ok(_) => Response::Ack,
                Err(reason) => {
                    self.stats.count_nack(reason);
                    Response::Nack(reason)
                }
            });
        }
        st.encode_ready();
        if !st.writing_async {
            self.write_now(&mut st);
        }
        let notify =
            st.wants_progress || st.write_failed || (!st.out.is_empty() && !st.writing_async);
        drop(st);
        if notify {
            self.notify_actor();
        }
    }
}
