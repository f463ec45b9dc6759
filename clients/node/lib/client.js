'use strict';
// Client: one connection to a spillway (or weir v1) daemon's Unix socket.
//
// Every request is encoded as soon as it is made, queued in call order and
// written as soon as the window allows; the daemon answers strictly in
// request order, so the oldest unanswered request owns the next answer.
// Requests written in one turn of the event loop leave in one write. Reading
// is event driven and never stops, so a full window can never deadlock
// against a daemon that is itself waiting for us to read its answers.
//
// Invariants:
// - queue[head .. sent) have been handed to the socket and await answers,
//   queue[sent .. queue.length) wait locally (window full, or socket not drained);
// - once `failure` is set the connection is dead: every outstanding request
//   has been settled with an error and every new one is refused with it.

const net = require('node:net');

const {
  SpillwayError,
  NackError,
  ProtocolError,
  TimeoutError,
  ConnectionClosedError,
} = require('./errors');
const protocol = require('./protocol');
const { Pipeline } = require('./pipeline');

const { HEADER_LEN, TRAILER_LEN, PAYLOAD_BYTES_HARD_MAX } = protocol;

const DEFAULTS = Object.freeze({
  connectTimeoutMs: 10_000,
  timeoutMs: 10_000,
  payloadBytesMax: PAYLOAD_BYTES_HARD_MAX,
  window: 1024,
});

/** Frames are encoded into slabs of this size (a larger frame gets its own). */
const SLAB_BYTES = 1024 * 1024;
/** Node's write buffer may hold this much before write() asks us to wait for 'drain'. */
const WRITE_HIGH_WATER_BYTES = 1024 * 1024;

/** What a request expects back. */
const EXPECT_ACK = 0;
const EXPECT_ACK_BATCH = 1;
const EXPECT_HEALTH = 2;

const EXPECTED_NAMES = ['ack', 'ack_batch', 'health_check_response'];

/** The Ack frame, as four little-endian u32 words plus a zero trailer: the hot path's fast match. */
const ACK_WORDS = [0x52494557, 0x00010201, 0x00000000, 0x3a4b47c9, 0x00000000];
const ACK = Object.freeze({ type: 'ack' });

/** One request: its encoded frame until written, then what its answer must be. */
class Request {
  constructor(expect, count, slab, off, len) {
    this.expect = expect;
    /** Records in the request (the AckBatch count it must get). */
    this.count = count;
    /** The frame is slab[off, off + len); `slab` is dropped once written. */
    this.slab = slab;
    this.off = off;
    this.len = len;
    /** A pipeline's window this request counts against, or null. */
    this.lane = null;
    /** Promise callbacks, or a pipeline's batch of outcomes (`owner.settle(index, ...)`). */
    this.resolve = null;
    this.reject = null;
    this.owner = null;
    this.index = 0;
  }

  settle(error, value) {
    // A pipeline records the count (1 for a push, 0 for a health check):
    // on success it equals what the daemon acked.
    if (this.owner !== null) this.owner.settle(this.index, error, this.count);
    else if (error !== null) this.reject(error);
    else this.resolve(value);
  }
}

function positiveInt(name, value, max = Number.MAX_SAFE_INTEGER) {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new RangeError(`option ${name} must be an integer in 1..=${max}, got ${value}`);
  }
  return value;
}

function resolveOptions(options = {}) {
  const o = { ...DEFAULTS, ...options };
  positiveInt('connectTimeoutMs', o.connectTimeoutMs);
  positiveInt('timeoutMs', o.timeoutMs);
  positiveInt('payloadBytesMax', o.payloadBytesMax, PAYLOAD_BYTES_HARD_MAX);
  positiveInt('window', o.window);
  return o;
}

/**
 * Connects to the daemon at `path`. Resolves with a Client; rejects with a
 * TimeoutError (connectTimeoutMs) or a SpillwayError naming the path and the
 * system error (its `code`, e.g. 'ENOENT' or 'ECONNREFUSED').
 */
function connect(path, options) {
  let opts;
  try {
    opts = resolveOptions(options);
  } catch (e) {
    return Promise.reject(e);
  }
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ path, writableHighWaterMark: WRITE_HIGH_WATER_BYTES });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new TimeoutError(`timed out connecting to ${path}: no connection within ${opts.connectTimeoutMs} ms`));
    }, opts.connectTimeoutMs);
    socket.once('error', (e) => {
      clearTimeout(timer);
      const err = new SpillwayError(`cannot connect to ${path}: ${e.message}`, { cause: e });
      err.code = e.code;
      reject(err);
    });
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(new Client(socket, path, opts));
    });
  });
}

class Client {
  /** Use connect(); this wraps an already connected socket. */
  constructor(socket, path, opts) {
    this.path = path;
    this.options = Object.freeze({ ...opts });
    this.payloadBytesMax = opts.payloadBytesMax;
    this.timeoutMs = opts.timeoutMs;
    this.window = opts.window;

    this._socket = socket;
    this._queue = [];
    this._head = 0;
    this._sent = 0;
    /** write() returned false: nothing more is written until 'drain'. */
    this._blocked = false;
    this._pumpScheduled = false;
    this._failure = null;
    this._closing = false;
    this._closeWaiters = [];
    this._closeListening = false;
    /** Bytes of a partial answer frame carried over to the next read. */
    this._carry = null;

    this._slab = Buffer.allocUnsafeSlow(SLAB_BYTES);
    this._slabOff = 0;

    /** Time of the last sign of progress while something is outstanding. */
    this._progressAt = 0;
    this._timer = null;
    this._onTimer = () => this._checkTimeout();
    this._pumpNow = () => {
      this._pumpScheduled = false;
      this._pump();
    };

    socket.on('data', (chunk) => this._onData(chunk));
    socket.on('drain', () => {
      this._blocked = false;
      this._progressAt = Date.now();
      this._pump();
    });
    socket.on('end', () => this._onGone(null));
    socket.on('error', (e) => this._onGone(e));
    socket.on('close', () => this._onGone(null));
  }

  /** Requests made but not answered yet (written or waiting locally). */
  get outstanding() {
    return this._queue.length - this._head;
  }

  /** Requests written to the socket and awaiting their answers. */
  get inFlight() {
    return this._sent - this._head;
  }

  /** Bytes handed to the socket so far. */
  get bytesWritten() {
    return this._socket.bytesWritten;
  }

  /** True once the connection can take no more requests. */
  get closed() {
    return this._failure !== null || this._closing;
  }

  /** Stores one record at `tier`; resolves once the daemon has acked it. */
  push(tier, record) {
    let request;
    try {
      request = this._encodePush(tier, record);
    } catch (e) {
      return Promise.reject(e);
    }
    return this._promise(request);
  }

  /**
   * Stores `records` at `tier` in one PushBatch frame; resolves with the
   * number of records acked (always records.length: any other AckBatch count
   * is a ProtocolError).
   */
  pushBatch(tier, records) {
    let request;
    try {
      request = this._encodePushBatch(tier, records);
    } catch (e) {
      return Promise.reject(e);
    }
    return this._promise(request);
  }

  /** Resolves once the daemon answers a HealthCheck (a nack rejects with NackError). */
  health() {
    let request;
    try {
      request = this._encodeHealth();
    } catch (e) {
      return Promise.reject(e);
    }
    return this._promise(request);
  }

  /** A pipelined sender on this connection, see Pipeline. */
  pipeline(options = {}) {
    return new Pipeline(this, options);
  }

  /**
   * Refuses new requests, waits until every outstanding one is answered (or
   * failed), then closes the socket. Resolves when the socket is closed.
   */
  close() {
    if (this._failure !== null && this._socket.destroyed) return Promise.resolve();
    this._closing = true;
    return new Promise((resolve) => {
      this._closeWaiters.push(resolve);
      this._maybeFinishClose();
    });
  }

  /** Closes the connection now; outstanding requests fail with ConnectionClosedError. */
  destroy() {
    this._fail(new ConnectionClosedError('connection closed by the client'));
  }

  // ---- encoding ----------------------------------------------------------

  _refusal() {
    const failure = this._failure;
    if (failure instanceof ConnectionClosedError) return failure;
    if (failure !== null) {
      return new ConnectionClosedError(`the connection is closed after an earlier error: ${failure.message}`, { cause: failure });
    }
    if (this._closing) return new ConnectionClosedError('the client is closing: no new requests');
    return null;
  }

  /** Room for `len` bytes in the current slab; returns the offset. */
  _reserve(len) {
    if (this._slab.length - this._slabOff < len) {
      this._slab = Buffer.allocUnsafeSlow(Math.max(SLAB_BYTES, len));
      this._slabOff = 0;
    }
    const off = this._slabOff;
    this._slabOff += len;
    return off;
  }

  _encodePush(tier, record) {
    const t = protocol.tierByte(tier);
    const len = protocol.checkPush(record, this.payloadBytesMax);
    const refusal = this._refusal();
    if (refusal !== null) throw refusal;
    const total = HEADER_LEN + len + TRAILER_LEN;
    const off = this._reserve(total);
    protocol.encodePushInto(this._slab, off, t, record, len);
    return new Request(EXPECT_ACK, 1, this._slab, off, total);
  }

  _encodePushBatch(tier, records) {
    const t = protocol.tierByte(tier);
    const payloadLen = protocol.checkBatch(records, this.payloadBytesMax);
    const refusal = this._refusal();
    if (refusal !== null) throw refusal;
    const total = HEADER_LEN + payloadLen + TRAILER_LEN;
    const off = this._reserve(total);
    protocol.encodePushBatchInto(this._slab, off, t, records, payloadLen);
    return new Request(EXPECT_ACK_BATCH, records.length, this._slab, off, total);
  }

  _encodeHealth() {
    const refusal = this._refusal();
    if (refusal !== null) throw refusal;
    const total = HEADER_LEN + TRAILER_LEN;
    const off = this._reserve(total);
    protocol.encodeHealthCheckInto(this._slab, off);
    return new Request(EXPECT_HEALTH, 0, this._slab, off, total);
  }

  _promise(request) {
    return new Promise((resolve, reject) => {
      request.resolve = resolve;
      request.reject = reject;
      this._enqueue(request);
    });
  }

  /** Queues an encoded request; it is written at the end of this turn of the event loop. */
  _enqueue(request) {
    this._queue.push(request);
    if (!this._pumpScheduled) {
      this._pumpScheduled = true;
      process.nextTick(this._pumpNow);
    }
  }

  // ---- writing -----------------------------------------------------------

  /** Writes every waiting request the window allows, contiguous frames in one write. */
  _pump() {
    if (this._failure !== null || this._blocked) return;
    const queue = this._queue;
    const end = queue.length;
    const limit = this._head + this.window;
    const wasIdle = this._sent === this._head;
    let i = this._sent;
    while (i < end && i < limit) {
      const first = queue[i];
      if (first.lane !== null && first.lane.inflight >= first.lane.window) break;
      const slab = first.slab;
      const start = first.off;
      let stop = start;
      do {
        const r = queue[i];
        if (r.slab !== slab || r.off !== stop) break;
        if (r.lane !== null) {
          if (r.lane.inflight >= r.lane.window) break;
          r.lane.inflight++;
        }
        stop += r.len;
        r.slab = null;
        i++;
      } while (i < end && i < limit);
      this._sent = i;
      if (!this._socket.write(slab.subarray(start, stop))) {
        this._blocked = true;
        break;
      }
    }
    if (this._sent !== this._head) {
      if (wasIdle) this._progressAt = Date.now();
      this._armTimer();
    }
  }

  // ---- timeouts ----------------------------------------------------------

  _armTimer() {
    if (this._timer === null) {
      this._timer = setTimeout(this._onTimer, this.timeoutMs);
      this._timer.unref();
    }
  }

  /**
   * Fires at most every timeoutMs while requests are in flight: the
   * connection fails when no answer (and no write progress) came for
   * timeoutMs. One timer per connection, not per request.
   */
  _checkTimeout() {
    this._timer = null;
    if (this._failure !== null || (this._sent === this._head && !this._blocked)) return;
    const idle = Date.now() - this._progressAt;
    if (idle < this.timeoutMs) {
      this._timer = setTimeout(this._onTimer, this.timeoutMs - idle);
      this._timer.unref();
      return;
    }
    const n = this._sent - this._head;
    this._fail(
      new TimeoutError(
        `timed out: no answer from the daemon to ${n} request(s) for ${this.timeoutMs} ms; ` +
          'the connection is closed and the outcome of the unanswered requests is unknown',
      ),
    );
  }

  // ---- reading -----------------------------------------------------------

  _onData(chunk) {
    if (this._failure !== null) return;
    let buf = chunk;
    if (this._carry !== null) {
      buf = Buffer.concat([this._carry, chunk]);
      this._carry = null;
    }
    const n = buf.length;
    let off = 0;
    try {
      while (n - off >= HEADER_LEN) {
        if (
          n - off >= 20 &&
          buf.readUInt32LE(off) === ACK_WORDS[0] &&
          buf.readUInt32LE(off + 4) === ACK_WORDS[1] &&
          buf.readUInt32LE(off + 8) === ACK_WORDS[2] &&
          buf.readUInt32LE(off + 12) === ACK_WORDS[3] &&
          buf.readUInt32LE(off + 16) === ACK_WORDS[4]
        ) {
          off += 20;
          this._answer(ACK);
        } else {
          const decoded = protocol.decodeResponse(buf, off);
          if (decoded === null) break;
          off += decoded.frameLen;
          this._answer(decoded.response);
        }
        if (this._failure !== null) return;
      }
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
      this._fail(e);
      return;
    }
    if (off < n) this._carry = Buffer.from(buf.subarray(off));
    this._progressAt = Date.now();
    this._pump();
    this._maybeFinishClose();
  }

  /** Hands one answer to the oldest request in flight. */
  _answer(response) {
    if (this._head === this._sent) {
      this._fail(new ProtocolError(`the daemon sent ${response.type} with no request outstanding`));
      return;
    }
    const request = this._queue[this._head];
    this._queue[this._head] = undefined;
    this._head++;
    if (request.lane !== null) request.lane.inflight--;
    this._compact();

    if (response.type === 'nack') {
      const error = new NackError(response);
      request.settle(error, undefined);
      if (!response.retryable) {
        this._fail(
          new ConnectionClosedError(`connection closed by the daemon after it nacked an earlier request: ${error.message}`, {
            cause: error,
          }),
        );
      }
      return;
    }
    if (request.expect === EXPECT_ACK && response.type === 'ack') {
      request.settle(null, undefined);
    } else if (request.expect === EXPECT_HEALTH && response.type === 'health_check_response') {
      request.settle(null, undefined);
    } else if (request.expect === EXPECT_ACK_BATCH && response.type === 'ack_batch') {
      if (response.count === request.count) {
        request.settle(null, response.count);
      } else {
        this._failWith(
          request,
          new ProtocolError(`the daemon acked ${response.count} records of a ${request.count}-record batch (AckBatch must count them all)`),
        );
      }
    } else {
      this._failWith(
        request,
        new ProtocolError(`the daemon answered ${response.type} where ${EXPECTED_NAMES[request.expect]} was expected`),
      );
    }
  }

  /** Drops answered slots from the front of the queue now and then (amortised O(1)). */
  _compact() {
    const head = this._head;
    if (head >= 4096 && head * 2 >= this._queue.length) {
      this._queue.splice(0, head);
      this._sent -= head;
      this._head = 0;
    }
  }

  /** `request` (already taken off the queue) gets `error`; so does the connection. */
  _failWith(request, error) {
    request.settle(error, undefined);
    this._fail(error);
  }

  /** The socket ended, errored or closed. */
  _onGone(socketError) {
    if (this._failure !== null) {
      this._maybeFinishClose();
      return;
    }
    let error;
    if (this._carry !== null && this._carry.length > 0) {
      error = new ProtocolError(
        `the daemon closed the connection in the middle of a frame (${this._carry.length} bytes of it received)`,
        { cause: socketError ?? undefined },
      );
    } else {
      const n = this._sent - this._head;
      const why = socketError ? ` (${socketError.code ?? socketError.message})` : '';
      const detail = n > 0 ? ` with ${n} request(s) unanswered` : '';
      // EPIPE: the daemon hung up while we were still writing, so the nack
      // that explains why (read after the write fails) is lost with the socket.
      const hint =
        socketError && socketError.code === 'EPIPE'
          ? '; the daemon hangs up mid-request after a closing nack, e.g. payload_too_large when ' +
            "the client's payloadBytesMax is above the daemon's payload_bytes_max"
          : '';
      error = new ConnectionClosedError(`connection closed by the daemon${detail}${why}${hint}`, {
        cause: socketError ?? undefined,
      });
    }
    this._fail(error);
  }

  /**
   * Kills the connection: requests in flight get `error`, requests never
   * written get a ConnectionClosedError saying so; the socket is destroyed.
   */
  _fail(error) {
    if (this._failure !== null) return;
    this._failure = error;
    if (this._timer !== null) {
      clearTimeout(this._timer);
      this._timer = null;
    }
    const queue = this._queue;
    const head = this._head;
    const sent = this._sent;
    this._queue = [];
    this._head = 0;
    this._sent = 0;
    this._carry = null;
    this._socket.destroy();
    let unsent = null;
    for (let i = head; i < queue.length; i++) {
      const request = queue[i];
      if (request.lane !== null && i < sent) request.lane.inflight--;
      if (i < sent) {
        request.settle(error, undefined);
      } else {
        unsent ??= new ConnectionClosedError(`request not sent: the connection failed first (${error.message})`, {
          cause: error,
        });
        request.settle(unsent, undefined);
      }
    }
    this._maybeFinishClose();
  }

  _maybeFinishClose() {
    if (!this._closing && this._failure === null) return;
    if (this._closeWaiters.length === 0) return;
    if (this._failure === null) {
      if (this._queue.length - this._head > 0) return;
      this._failure = new ConnectionClosedError('connection closed by the client');
      if (this._timer !== null) {
        clearTimeout(this._timer);
        this._timer = null;
      }
      this._socket.destroy();
    }
    if (!this._socket.destroyed) return;
    const finish = () => {
      const waiters = this._closeWaiters;
      this._closeWaiters = [];
      for (const w of waiters) w();
    };
    if (this._socket.closed) {
      finish();
    } else if (!this._closeListening) {
      this._closeListening = true;
      this._socket.once('close', finish);
    }
  }
}

module.exports = { connect, Client, DEFAULTS };
