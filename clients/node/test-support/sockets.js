'use strict';
// Test support: raw Unix-socket exchanges (bytes in, bytes out, no client
// code involved) and a scriptable fake daemon for the hostile-daemon tests.

const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');

const { crc32 } = require('../lib/crc32');

/**
 * Connects to socketPath, writes `frame`, and reads until `wantBytes` bytes
 * arrived (then closes, `ended` false) or until the peer closes (`ended`
 * true), or until timeoutMs (`timedOut` true).
 * Resolves with { data, ended, timedOut, error }.
 */
function rawExchange(socketPath, frame, { wantBytes = Infinity, timeoutMs = 5000 } = {}) {
  return new Promise((resolve) => {
    const chunks = [];
    let size = 0;
    let done = false;
    const socket = net.createConnection({ path: socketPath });
    const finish = (result) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ data: Buffer.concat(chunks), ...result });
    };
    const timer = setTimeout(() => finish({ ended: false, timedOut: true, error: null }), timeoutMs);
    socket.on('connect', () => socket.write(frame));
    socket.on('data', (chunk) => {
      chunks.push(chunk);
      size += chunk.length;
      if (size >= wantBytes) finish({ ended: false, timedOut: false, error: null });
    });
    socket.on('end', () => finish({ ended: true, timedOut: false, error: null }));
    // A daemon that closes with our bytes unread makes Linux report ECONNRESET
    // (after the data it sent); to the test that is the end of the stream.
    socket.on('error', (error) => finish({ ended: error.code === 'ECONNRESET' || error.code === 'EPIPE', timedOut: false, error }));
    socket.on('close', () => finish({ ended: true, timedOut: false, error: null }));
  });
}

/**
 * A fake daemon on a Unix socket in `dir`. Every complete request frame
 * (parsed by its header's length only, so anything a client sends is framed)
 * is passed to `onFrame(frame, conn, n)` where n counts frames on that
 * connection from 0 and conn is { socket, received: [frames] }.
 * Resolves with { path, connections, close() }.
 */
function fakeDaemon(dir, onFrame, { name = 'fake.sock', onConnection = null } = {}) {
  const socketPath = path.join(dir, name);
  fs.rmSync(socketPath, { force: true });
  const connections = [];
  const server = net.createServer((socket) => {
    const conn = { socket, received: [] };
    connections.push(conn);
    let buf = Buffer.alloc(0);
    socket.on('error', () => {});
    if (onConnection) onConnection(conn);
    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      while (buf.length >= 16) {
        const total = 16 + buf.readUInt32LE(8) + 4;
        if (buf.length < total) break;
        const frame = buf.subarray(0, total);
        buf = buf.subarray(total);
        const n = conn.received.length;
        conn.received.push(frame);
        if (onFrame) onFrame(frame, conn, n);
      }
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      resolve({
        path: socketPath,
        connections,
        close() {
          for (const c of connections) c.socket.destroy();
          return new Promise((r) => server.close(() => r()));
        },
      });
    });
  });
}

/**
 * A response frame as a daemon would write it: type byte, filler tier 0x01,
 * flags 0, the payload and both CRCs. The fake daemons build their answers
 * with it (the vector tests check the client's decoder on the real bytes).
 */
function responseFrame(type, payload = []) {
  const body = Buffer.from(payload);
  const frame = Buffer.alloc(16 + body.length + 4);
  frame.write('WEIR', 0, 'latin1');
  frame[4] = 1;
  frame[5] = type;
  frame[6] = 1;
  frame[7] = 0;
  frame.writeUInt32LE(body.length, 8);
  frame.writeUInt32LE(crc32(frame, 0, 12), 12);
  body.copy(frame, 16);
  frame.writeUInt32LE(body.length === 0 ? 0 : crc32(body), 16 + body.length);
  return frame;
}

const FRAMES = {
  ack: () => responseFrame(0x02),
  healthCheckResponse: () => responseFrame(0x05),
  ackBatch: (count) => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(count);
    return responseFrame(0x07, b);
  },
  nack: (reasonByte) => responseFrame(0x03, [reasonByte]),
  versionMismatch: () => responseFrame(0x03, [0x02, 0x01]),
};

module.exports = { rawExchange, fakeDaemon, responseFrame, FRAMES };
