'use strict';
// The weir v1 wire protocol with spillway's extensions (PushBatch, AckBatch,
// Overloaded), as described in docs/wire-protocol.md: frame constants, the
// request encoders (which write into a caller's buffer, so the hot path
// allocates nothing per record), the local checks that refuse a request
// before it is sent, and the response decoder.

const { crc32, crc32Js } = require('./crc32');
const { ProtocolError, RecordRejectedError } = require('./errors');

const HEADER_LEN = 16;
const TRAILER_LEN = 4;
/** No daemon accepts a payload longer than this, whatever its configuration. */
const PAYLOAD_BYTES_HARD_MAX = 16 * 1024 * 1024;
const VERSION = 1;

const MessageType = Object.freeze({
  Push: 0x01,
  Ack: 0x02,
  Nack: 0x03,
  HealthCheck: 0x04,
  HealthCheckResponse: 0x05,
  PushBatch: 0x06,
  AckBatch: 0x07,
});

const MESSAGE_TYPE_NAMES = [
  null, 'push', 'ack', 'nack', 'health_check', 'health_check_response', 'push_batch', 'ack_batch',
];

/** Durability tiers (header byte 6 of a push). */
const Tier = Object.freeze({ Sync: 1, Batched: 2, Buffered: 3 });

const TIER_BY_NAME = { sync: 1, batched: 2, buffered: 3 };

/** Nack reasons by byte; index 0 is unassigned. */
const NACK_REASONS = [
  null,
  'bad_magic',
  'version_mismatch',
  'bad_header_crc',
  'payload_too_large',
  'bad_payload_crc',
  'internal_error',
  'empty_payload',
  'unknown_message',
  'reserved_flags_set',
  'overloaded',
];

/** Reason name -> byte, e.g. NackReason.overloaded === 0x0a. */
const NackReason = Object.freeze(
  Object.fromEntries(NACK_REASONS.map((name, byte) => [name, byte]).filter(([name]) => name !== null)),
);

const INTERNAL_ERROR = 0x06;
const OVERLOADED = 0x0a;

/** Only these two leave the connection open; resend after a back-off. */
function isRetryableReason(byte) {
  return byte === INTERNAL_ERROR || byte === OVERLOADED;
}

/** A tier given as 1..3 or as a name ("sync", "batched", "buffered") -> its byte. */
function tierByte(tier) {
  if (tier === 1 || tier === 2 || tier === 3) return tier;
  if (typeof tier === 'string') {
    const byte = TIER_BY_NAME[tier.toLowerCase()];
    if (byte !== undefined) return byte;
  }
  throw new TypeError(`unknown tier ${JSON.stringify(tier)}: use Tier.Sync (1), Tier.Batched (2) or Tier.Buffered (3)`);
}

/** Payload bytes of one record: a Uint8Array (Buffer) as is, a string as UTF-8. */
function recordLength(record) {
  if (record instanceof Uint8Array) return record.length;
  if (typeof record === 'string') return Buffer.byteLength(record, 'utf8');
  throw new TypeError(`a record must be a Buffer, a Uint8Array or a string, not ${typeof record}`);
}

/**
 * Refuses a Push the daemon would nack (or that could not be framed) and
 * returns its payload length. `limit` is the client's payload_bytes_max.
 */
function checkPush(record, limit) {
  const len = recordLength(record);
  if (len === 0) {
    throw new RecordRejectedError('push refused before sending: record 0 is empty (a record needs at least 1 byte)', {
      index: 0,
    });
  }
  if (len > limit) {
    throw new RecordRejectedError(
      `push refused before sending: record 0 has ${len} bytes, over payload_bytes_max ${limit}`,
      { index: 0, limit, bytes: len },
    );
  }
  return len;
}

/**
 * Refuses a PushBatch the daemon would nack (or that could not be framed)
 * and returns its payload length, 4 + sum(4 + len).
 */
function checkBatch(records, limit) {
  if (!Array.isArray(records)) throw new TypeError('push_batch takes an array of records');
  const n = records.length;
  if (n === 0) throw new RecordRejectedError('push_batch refused before sending: no records (a batch needs at least 1)');
  let payloadLen = 4;
  for (let i = 0; i < n; i++) {
    const len = recordLength(records[i]);
    if (len === 0) {
      throw new RecordRejectedError(
        `push_batch refused before sending: record ${i} of ${n} is empty (a record needs at least 1 byte)`,
        { index: i },
      );
    }
    payloadLen += 4 + len;
    if (payloadLen > limit) {
      throw new RecordRejectedError(
        `push_batch refused before sending: the batch payload (4 + sum of 4 + record length) reaches ${payloadLen} bytes ` +
          `at record ${i} of ${n}, over payload_bytes_max ${limit}`,
        { index: i, limit, bytes: payloadLen },
      );
    }
  }
  return payloadLen;
}

/** Frame bytes for a payload of `payloadLen` bytes. */
function frameLen(payloadLen) {
  return HEADER_LEN + payloadLen + TRAILER_LEN;
}

function writeHeader(out, off, type, tier, payloadLen) {
  out[off] = 0x57; // W
  out[off + 1] = 0x45; // E
  out[off + 2] = 0x49; // I
  out[off + 3] = 0x52; // R
  out[off + 4] = VERSION;
  out[off + 5] = type;
  out[off + 6] = tier;
  out[off + 7] = 0;
  out.writeUInt32LE(payloadLen, off + 8);
  out.writeUInt32LE(crc32Js(out, off, off + 12), off + 12);
}

/** Records this short are copied byte by byte: cheaper than a native set(). */
const COPY_LOOP_MAX = 16;

/** Copies one record into out at p; returns the offset after it. */
function writeRecord(out, p, record, len) {
  if (typeof record === 'string') {
    out.write(record, p, len, 'utf8');
  } else if (len <= COPY_LOOP_MAX) {
    for (let i = 0; i < len; i++) out[p + i] = record[i];
  } else {
    out.set(record, p);
  }
  return p + len;
}

/**
 * Writes a Push frame into out at off (room for frameLen(len) bytes must be
 * there; `len` comes from checkPush). Returns the offset after the frame.
 */
function encodePushInto(out, off, tier, record, len) {
  writeHeader(out, off, MessageType.Push, tier, len);
  const start = off + HEADER_LEN;
  const end = writeRecord(out, start, record, len);
  out.writeUInt32LE(crc32(out, start, end), end);
  return end + TRAILER_LEN;
}

/**
 * Writes a PushBatch frame into out at off; `payloadLen` comes from
 * checkBatch. Returns the offset after the frame.
 */
function encodePushBatchInto(out, off, tier, records, payloadLen) {
  writeHeader(out, off, MessageType.PushBatch, tier, payloadLen);
  const start = off + HEADER_LEN;
  const n = records.length;
  out.writeUInt32LE(n, start);
  let p = start + 4;
  for (let i = 0; i < n; i++) {
    const record = records[i];
    const len = typeof record === 'string' ? Buffer.byteLength(record, 'utf8') : record.length;
    out.writeUInt32LE(len, p);
    p = writeRecord(out, p + 4, record, len);
  }
  if (p !== start + payloadLen) throw new Error('batch changed between its check and its encoding');
  out.writeUInt32LE(crc32(out, start, p), p);
  return p + TRAILER_LEN;
}

/** Writes a HealthCheck frame (20 bytes) into out at off. */
function encodeHealthCheckInto(out, off) {
  writeHeader(out, off, MessageType.HealthCheck, 1, 0);
  out.writeUInt32LE(0, off + HEADER_LEN);
  return off + HEADER_LEN + TRAILER_LEN;
}

/** A Push frame as a new Buffer (checked against the hard maximum). */
function encodePush(tier, record, limit = PAYLOAD_BYTES_HARD_MAX) {
  const len = checkPush(record, limit);
  const out = Buffer.allocUnsafe(frameLen(len));
  encodePushInto(out, 0, tierByte(tier), record, len);
  return out;
}

/** A PushBatch frame as a new Buffer (checked against the hard maximum). */
function encodePushBatch(tier, records, limit = PAYLOAD_BYTES_HARD_MAX) {
  const payloadLen = checkBatch(records, limit);
  const out = Buffer.allocUnsafe(frameLen(payloadLen));
  encodePushBatchInto(out, 0, tierByte(tier), records, payloadLen);
  return out;
}

/** A HealthCheck frame as a new Buffer. */
function encodeHealthCheck() {
  const out = Buffer.allocUnsafe(HEADER_LEN + TRAILER_LEN);
  encodeHealthCheckInto(out, 0);
  return out;
}

function hex8(n) {
  return '0x' + n.toString(16).padStart(8, '0');
}

function hex2(n) {
  return '0x' + n.toString(16).padStart(2, '0');
}

/** Payload length each response type calls for: [min, max]. */
function expectedLen(type) {
  if (type === MessageType.Nack) return [1, 2];
  if (type === MessageType.AckBatch) return [4, 4];
  return [0, 0];
}

/**
 * Checks the 16-byte header at buf[off..] of a response: magic, version,
 * header CRC, message type, flags and the payload length the type calls for,
 * in that order. Returns the payload length. Throws ProtocolError.
 */
function checkResponseHeader(buf, off) {
  if (buf[off] !== 0x57 || buf[off + 1] !== 0x45 || buf[off + 2] !== 0x49 || buf[off + 3] !== 0x52) {
    const magic = buf.subarray(off, off + 4);
    const shown = [...magic].map((b) => b.toString(16).padStart(2, '0')).join(' ');
    throw new ProtocolError(`bad magic: bytes 0..4 are ${shown} (${JSON.stringify(magic.toString('latin1'))}), expected "WEIR"`);
  }
  if (buf[off + 4] !== VERSION) {
    throw new ProtocolError(`version byte ${hex2(buf[off + 4])}, expected ${hex2(VERSION)}`);
  }
  const stored = buf.readUInt32LE(off + 12);
  const computed = crc32Js(buf, off, off + 12);
  if (stored !== computed) {
    throw new ProtocolError(`header CRC field is ${hex8(stored)} but bytes 0..12 hash to ${hex8(computed)}`);
  }
  const type = buf[off + 5];
  const name = MESSAGE_TYPE_NAMES[type];
  if (name === undefined || name === null) {
    throw new ProtocolError(`unknown message type byte ${hex2(type)} where a response was expected`);
  }
  if (type === MessageType.Push || type === MessageType.HealthCheck || type === MessageType.PushBatch) {
    throw new ProtocolError(`message type byte ${hex2(type)} (${name}) is a request, not a response`);
  }
  if (buf[off + 7] !== 0) {
    throw new ProtocolError(`flags byte is ${hex2(buf[off + 7])}, must be 0x00`);
  }
  const len = buf.readUInt32LE(off + 8);
  const [min, max] = expectedLen(type);
  if (len < min || len > max) {
    const expected = min === max ? `${min}` : `${min} or ${max}`;
    throw new ProtocolError(`${name} declares a ${len}-byte payload, expected ${expected}`);
  }
  return len;
}

/**
 * Decodes the response frame at buf[off..].
 *
 * Returns null when more bytes are needed (a header that is present is
 * checked first, so a bad one fails without waiting for its payload), else
 * { response, frameLen }. `response` is one of
 *   { type: 'ack' }
 *   { type: 'health_check_response' }
 *   { type: 'ack_batch', count }
 *   { type: 'nack', reason, reasonByte, retryable, closesConnection[, daemonVersion] }
 * Throws ProtocolError for anything that is not a valid response frame.
 */
function decodeResponse(buf, off = 0) {
  if (buf.length - off < HEADER_LEN) return null;
  const len = checkResponseHeader(buf, off);
  const total = HEADER_LEN + len + TRAILER_LEN;
  if (buf.length - off < total) return null;
  const start = off + HEADER_LEN;
  const stored = buf.readUInt32LE(start + len);
  const computed = len === 0 ? 0 : crc32Js(buf, start, start + len);
  if (stored !== computed) {
    throw new ProtocolError(`payload CRC field is ${hex8(stored)} but the payload hashes to ${hex8(computed)}`);
  }
  const type = buf[off + 5];
  let response;
  if (type === MessageType.Ack) {
    response = { type: 'ack' };
  } else if (type === MessageType.HealthCheckResponse) {
    response = { type: 'health_check_response' };
  } else if (type === MessageType.AckBatch) {
    response = { type: 'ack_batch', count: buf.readUInt32LE(start) };
  } else {
    response = decodeNack(buf, start, len);
  }
  return { response, frameLen: total };
}

function decodeNack(buf, start, len) {
  const byte = buf[start];
  const reason = NACK_REASONS[byte];
  if (reason === undefined || reason === null) {
    throw new ProtocolError(`nack with unknown reason byte ${hex2(byte)}`);
  }
  const retryable = isRetryableReason(byte);
  const nack = { type: 'nack', reason, reasonByte: byte, retryable, closesConnection: !retryable };
  if (len === 2) nack.daemonVersion = buf[start + 1];
  return nack;
}

module.exports = {
  HEADER_LEN,
  TRAILER_LEN,
  PAYLOAD_BYTES_HARD_MAX,
  VERSION,
  MessageType,
  Tier,
  NackReason,
  isRetryableReason,
  tierByte,
  recordLength,
  checkPush,
  checkBatch,
  frameLen,
  encodePushInto,
  encodePushBatchInto,
  encodeHealthCheckInto,
  encodePush,
  encodePushBatch,
  encodeHealthCheck,
  decodeResponse,
};
