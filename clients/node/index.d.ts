// Type declarations for spillway-client (hand-written; the package is plain
// CommonJS JavaScript with no build step).

/// <reference types="node" />

/** Durability tiers: the byte in a push's header. */
export declare const Tier: Readonly<{
  /** Acked once fdatasync has returned for the record's bytes. */
  Sync: 1;
  /** In spillway, the same as Sync (group-commit fsync, no timer). */
  Batched: 2;
  /** Acked once in the page cache; an fsync follows within wab.buffered_flush_interval_ms. */
  Buffered: 3;
}>;

/** A tier as its byte or its name. */
export type TierLike = 1 | 2 | 3 | 'sync' | 'batched' | 'buffered';

/** A record: bytes as they are, or a string sent as UTF-8. Must not be empty. */
export type RecordLike = Uint8Array | string;

export type NackReasonName =
  | 'bad_magic'
  | 'version_mismatch'
  | 'bad_header_crc'
  | 'payload_too_large'
  | 'bad_payload_crc'
  | 'internal_error'
  | 'empty_payload'
  | 'unknown_message'
  | 'reserved_flags_set'
  | 'overloaded';

/** Nack reason name -> byte (0x01..0x0a). */
export declare const NackReason: Readonly<Record<NackReasonName, number>>;

/** 16 MiB: no daemon accepts a larger payload, whatever its configuration. */
export declare const PAYLOAD_BYTES_HARD_MAX: 16777216;

export interface ConnectOptions {
  /** How long connecting may take. Default 10000. */
  connectTimeoutMs?: number;
  /**
   * Read/write timeout. While requests are in flight, the connection fails
   * with TimeoutError when no answer arrives for this long. Default 10000.
   */
  timeoutMs?: number;
  /**
   * Largest payload the client will send (a PushBatch counts whole:
   * 4 + sum(4 + record length)); larger requests are refused locally with
   * RecordRejectedError. Set it to the daemon's server.payload_bytes_max.
   * 1..16777216, default 16777216.
   */
  payloadBytesMax?: number;
  /** Most frames in flight on the connection; more requests wait locally. Default 1024. */
  window?: number;
}

export declare const DEFAULTS: Readonly<Required<ConnectOptions>>;

/** Connects to the daemon's Unix socket at `path`. */
export declare function connect(path: string, options?: ConnectOptions): Promise<Client>;

export declare class Client {
  private constructor();
  readonly path: string;
  readonly options: Readonly<Required<ConnectOptions>>;
  readonly payloadBytesMax: number;
  readonly timeoutMs: number;
  readonly window: number;
  /** Requests made and not answered yet (in flight or waiting locally). */
  readonly outstanding: number;
  /** Requests written to the socket and awaiting their answers. */
  readonly inFlight: number;
  /** Bytes handed to the socket so far. */
  readonly bytesWritten: number;
  /** True once the connection takes no more requests (closing, closed or failed). */
  readonly closed: boolean;

  /**
   * Stores one record at `tier`; resolves once the daemon has acked it.
   * The record is copied before push() returns. Many pushes may be in
   * flight at once; they resolve in call order.
   */
  push(tier: TierLike, record: RecordLike): Promise<void>;
  /** Stores the records in one PushBatch frame; resolves with the number acked (records.length). */
  pushBatch(tier: TierLike, records: readonly RecordLike[]): Promise<number>;
  /** Resolves when the daemon answers a HealthCheck; a nack rejects with NackError. */
  health(): Promise<void>;
  /** A pipelined sender on this connection. */
  pipeline(options?: PipelineOptions): Pipeline;
  /** Refuses new requests, waits for the outstanding ones, then closes the socket. */
  close(): Promise<void>;
  /** Closes at once; outstanding requests fail with ConnectionClosedError. */
  destroy(): void;
}

export interface PipelineOptions {
  /** Most of this pipeline's frames in flight at once. Default 64. */
  window?: number;
}

/** The outcome of one pipelined request: the records it stored, or its error. */
export type Outcome = number | SpillwayError;

export interface FlushResult {
  /** outcomes[i]: records stored by request i (1 for a push, 0 for a health check) or its error. */
  outcomes: Outcome[];
  /** Records stored. */
  acked: number;
  /** Requests that failed. */
  failed: number;
  /** The error of the earliest failed request in request order, or null. */
  firstError: SpillwayError | null;
}

export declare class Pipeline {
  private constructor();
  readonly client: Client;
  readonly window: number;
  /** Requests made and not answered yet. */
  readonly outstanding: number;
  /** Requests of this pipeline written and not answered yet (at most `window`). */
  readonly inFlight: number;
  /**
   * Queues a push without waiting; returns its index in the next flush()'s
   * outcomes. Throws RecordRejectedError / TypeError (nothing queued) for a
   * request refused locally, ConnectionClosedError on a closed connection.
   */
  push(tier: TierLike, record: RecordLike): number;
  /** Queues a PushBatch without waiting; its outcome is the record count. */
  pushBatch(tier: TierLike, records: readonly RecordLike[]): number;
  /** Queues a HealthCheck; its outcome is 0. */
  health(): number;
  /** Resolves once fewer than `limit` (default: window) requests are outstanding. */
  ready(limit?: number): Promise<void>;
  /** Waits for every request made since the last flush(); never rejects. */
  flush(): Promise<FlushResult>;
}

/** Base class of every error the client raises. */
export declare class SpillwayError extends Error {
  /** For a failed connect: the system error code, e.g. 'ENOENT'. */
  code?: string;
}

/** The daemon refused a request. */
export declare class NackError extends SpillwayError {
  readonly reason: NackReasonName;
  /** The reason byte, 0x01..0x0a. */
  readonly byte: number;
  /** True for internal_error and overloaded: back off and resend on the same connection. */
  readonly retryable: boolean;
  /** True for every other reason: the daemon has closed the connection. */
  readonly closesConnection: boolean;
  /** The daemon's protocol version (version_mismatch only). */
  readonly daemonVersion?: number;
}

/** The daemon sent bytes that are not a valid answer (a malformed frame, a wrong type or count). */
export declare class ProtocolError extends SpillwayError {}

/** No answer within timeoutMs (or no connection within connectTimeoutMs). */
export declare class TimeoutError extends SpillwayError {}

/** The connection is closed: by the daemon, by the client, or after an earlier error (see `cause`). */
export declare class ConnectionClosedError extends SpillwayError {}

/** A request refused before any byte was sent. */
export declare class RecordRejectedError extends SpillwayError {
  /** The offending record (0 for a push; null for a batch with no records). */
  readonly index: number | null;
  /** The payload limit that applied, in bytes (null for an empty record). */
  readonly limit: number | null;
  /** The payload size refused, in bytes (null for an empty record). */
  readonly bytes: number | null;
}

/** A decoded response frame. */
export type Response =
  | { type: 'ack' }
  | { type: 'health_check_response' }
  | { type: 'ack_batch'; count: number }
  | {
      type: 'nack';
      reason: NackReasonName;
      reasonByte: number;
      retryable: boolean;
      closesConnection: boolean;
      daemonVersion?: number;
    };

/** The wire codec, for tests and tools. */
export declare const protocol: {
  readonly HEADER_LEN: 16;
  readonly TRAILER_LEN: 4;
  readonly PAYLOAD_BYTES_HARD_MAX: 16777216;
  readonly VERSION: 1;
  readonly Tier: typeof Tier;
  readonly NackReason: typeof NackReason;
  isRetryableReason(byte: number): boolean;
  tierByte(tier: TierLike): 1 | 2 | 3;
  /** A Push frame; throws RecordRejectedError past `limit` (default 16 MiB). */
  encodePush(tier: TierLike, record: RecordLike, limit?: number): Buffer;
  /** A PushBatch frame; throws RecordRejectedError past `limit` (default 16 MiB). */
  encodePushBatch(tier: TierLike, records: readonly RecordLike[], limit?: number): Buffer;
  encodeHealthCheck(): Buffer;
  /** null when more bytes are needed; throws ProtocolError for an invalid frame. */
  decodeResponse(buf: Buffer, offset?: number): { response: Response; frameLen: number } | null;
};
