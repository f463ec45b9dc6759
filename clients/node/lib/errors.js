'use strict';
// The client's error classes. Every error the client produces is a
// SpillwayError; the subclass says what went wrong and what to do about it.

/** Base class of every error this client raises. */
class SpillwayError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'SpillwayError';
  }
}

/**
 * The daemon refused a request with a Nack.
 *
 * `retryable` is true only for internal_error and overloaded: the connection
 * stays open and the same request may be resent after a back-off. Every
 * other reason means the daemon has closed the connection (the client was
 * sent bytes it should never have sent, or speaks another version).
 */
class NackError extends SpillwayError {
  constructor(nack) {
    const hex = '0x' + nack.reasonByte.toString(16).padStart(2, '0');
    let advice = nack.retryable
      ? 'retryable: back off and resend'
      : 'not retryable: the daemon closes the connection';
    if (nack.daemonVersion !== undefined) advice += `; the daemon speaks protocol version ${nack.daemonVersion}`;
    super(`daemon nacked: ${nack.reason} (${hex}, ${advice})`);
    this.name = 'NackError';
    /** Reason name as in the protocol table, e.g. "overloaded". */
    this.reason = nack.reason;
    /** Reason byte, 0x01..0x0a. */
    this.byte = nack.reasonByte;
    /** Whether the same request may be resent on the same connection. */
    this.retryable = nack.retryable;
    /** Whether the daemon closes the connection after this nack. */
    this.closesConnection = nack.closesConnection;
    /** The daemon's protocol version (version_mismatch only). */
    this.daemonVersion = nack.daemonVersion;
  }
}

/** The daemon sent bytes that are not a valid answer to what was asked. */
class ProtocolError extends SpillwayError {
  constructor(detail, options) {
    super(`protocol error: ${detail}`, options);
    this.name = 'ProtocolError';
  }
}

/** No answer (or no write progress) within the configured time. */
class TimeoutError extends SpillwayError {
  constructor(message, options) {
    super(message, options);
    this.name = 'TimeoutError';
  }
}

/** The connection is closed (by the daemon, by the client, or after an earlier error). */
class ConnectionClosedError extends SpillwayError {
  constructor(message, options) {
    super(message, options);
    this.name = 'ConnectionClosedError';
  }
}

/**
 * A request refused by the client before any byte was sent.
 *
 * `index` is the offending record's position (0 for a push; null for a batch
 * with no records), `limit` the payload limit in bytes that applied (null when
 * the record was refused for being empty), `bytes` the payload size that was
 * refused (null when not a size refusal).
 */
class RecordRejectedError extends SpillwayError {
  constructor(message, { index = null, limit = null, bytes = null } = {}) {
    super(message);
    this.name = 'RecordRejectedError';
    this.index = index;
    this.limit = limit;
    this.bytes = bytes;
  }
}

module.exports = {
  SpillwayError,
  NackError,
  ProtocolError,
  TimeoutError,
  ConnectionClosedError,
  RecordRejectedError,
};
