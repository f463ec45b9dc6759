'use strict';
// Pipeline: send many requests on one Client without waiting for each, with
// at most `window` of them in flight, and collect every outcome at flush().
//
// A pipeline is a view on its client's connection: its requests take their
// place in the connection's one queue (so they are written, answered and
// delivered in call order with every other request on it) and are also held
// to the pipeline's own window. push() never blocks and never returns a
// promise: requests beyond the window wait, encoded, in memory until answers
// free room. Call flush() now and then to bound that memory.

const DEFAULT_WINDOW = 64;

/** The outcomes of the requests made between two flushes. */
class Round {
  constructor(pipeline) {
    this.pipeline = pipeline;
    /** outcomes[i]: records acked (a number) or the SpillwayError of request i. */
    this.outcomes = [];
    this.pending = 0;
    this.acked = 0;
    this.failed = 0;
    this.firstError = null;
    this.firstErrorIndex = -1;
    this.waiter = null;
  }

  /** Called by the client once per request: `value` is its record count. */
  settle(index, error, value) {
    if (error !== null) {
      this.outcomes[index] = error;
      this.failed++;
      // The first in request order, not the first to be reported.
      if (this.firstError === null || index < this.firstErrorIndex) {
        this.firstError = error;
        this.firstErrorIndex = index;
      }
    } else {
      this.outcomes[index] = value;
      this.acked += value;
    }
    this.pending--;
    if (this.pending === 0 && this.waiter !== null) this.finish();
    this.pipeline._settled();
  }

  finish() {
    const waiter = this.waiter;
    this.waiter = null;
    waiter({
      outcomes: this.outcomes,
      acked: this.acked,
      failed: this.failed,
      firstError: this.firstError,
    });
  }
}

class Pipeline {
  constructor(client, { window = DEFAULT_WINDOW } = {}) {
    if (!Number.isInteger(window) || window < 1) {
      throw new RangeError(`option window must be a positive integer, got ${window}`);
    }
    this.client = client;
    this.window = window;
    /** The window the connection's writer holds this pipeline's requests to. */
    this._lane = { window, inflight: 0 };
    this._round = new Round(this);
    /** Requests not answered yet, of every round (a flush may still be waiting). */
    this._outstanding = 0;
    /** ready() waiters: { limit, resolve }. */
    this._readyWaiters = [];
  }

  /** Requests made and not answered yet (in flight or waiting locally). */
  get outstanding() {
    return this._outstanding;
  }

  /** Requests of this pipeline written to the socket and not answered yet. */
  get inFlight() {
    return this._lane.inflight;
  }

  /**
   * Queues a Push. Returns the request's index in the next flush() result.
   * Throws (and queues nothing) for a request the client refuses locally
   * (RecordRejectedError, TypeError) or when the connection is closed.
   */
  push(tier, record) {
    return this._add(this.client._encodePush(tier, record));
  }

  /** Queues a PushBatch; its outcome is the record count. Same rules as push(). */
  pushBatch(tier, records) {
    return this._add(this.client._encodePushBatch(tier, records));
  }

  /** Queues a HealthCheck; its outcome is 0 (no records). */
  health() {
    return this._add(this.client._encodeHealth());
  }

  _add(request) {
    const round = this._round;
    request.lane = this._lane;
    request.owner = round;
    request.index = round.outcomes.length;
    round.outcomes.push(undefined);
    round.pending++;
    this._outstanding++;
    this.client._enqueue(request);
    return request.index;
  }

  /**
   * Resolves once fewer than `limit` (default: the window) requests of this
   * pipeline are outstanding: the way for a fast producer to let answers
   * catch up instead of queueing without bound. Never rejects (a failed
   * connection settles every request, which frees the room).
   */
  ready(limit = this.window) {
    if (this._outstanding < limit) return Promise.resolve();
    return new Promise((resolve) => this._readyWaiters.push({ limit, resolve }));
  }

  _settled() {
    this._outstanding--;
    const waiters = this._readyWaiters;
    if (waiters.length === 0) return;
    let kept = 0;
    for (let i = 0; i < waiters.length; i++) {
      const w = waiters[i];
      if (this._outstanding < w.limit) w.resolve();
      else waiters[kept++] = w;
    }
    waiters.length = kept;
  }

  /**
   * Waits until every request made since the last flush() is answered (or
   * failed) and resolves with
   *   { outcomes, acked, failed, firstError }
   * where outcomes[i] is the number of records request i stored (1 for a
   * push, 0 for a health check) or its error, `acked` the records stored,
   * `failed` the requests that failed and `firstError` the error of the
   * earliest failed request (null if none). Never rejects. Requests made
   * while a flush is waiting belong to the next flush.
   */
  flush() {
    const round = this._round;
    this._round = new Round(this);
    return new Promise((resolve) => {
      round.waiter = resolve;
      if (round.pending === 0) round.finish();
    });
  }
}

module.exports = { Pipeline, DEFAULT_WINDOW };
