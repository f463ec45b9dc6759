'use strict';
// The client against broken and hostile daemons: fake servers on a Unix
// socket in a temp folder that never answer, hang up mid-frame, answer
// garbage or nacks, or stop reading. No test may hang: every one is bounded
// by the client's own timeout.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const {
  connect,
  Tier,
  SpillwayError,
  NackError,
  ProtocolError,
  TimeoutError,
  ConnectionClosedError,
  protocol,
} = require('..');
const { makeTempDir, sleep } = require('../test-support/daemon');
const { fakeDaemon, FRAMES } = require('../test-support/sockets');

const VECTORS_PATH = path.join(__dirname, '..', '..', '..', 'protocol', 'conformance', 'vectors.json');

let dir;
let servers = [];
test.before(() => {
  dir = makeTempDir('spillway-node-fake-');
});
test.afterEach(async () => {
  for (const s of servers) await s.close();
  servers = [];
});
test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

let sockets = 0;
async function serve(onFrame, options = {}) {
  const server = await fakeDaemon(dir, onFrame, { name: `fake-${sockets++}.sock`, ...options });
  servers.push(server);
  return server;
}

const SHORT = { timeoutMs: 500, connectTimeoutMs: 500 };

test('a daemon that accepts and never answers: the read times out (500 ms), no hang', async () => {
  const server = await serve(() => {});
  const client = await connect(server.path, SHORT);
  const started = Date.now();
  await assert.rejects(client.push(Tier.Sync, 'hello'), (e) => {
    assert.ok(e instanceof TimeoutError, `got ${e}`);
    assert.ok(e instanceof SpillwayError);
    assert.match(e.message, /^timed out: no answer from the daemon to 1 request\(s\) for 500 ms/);
    return true;
  });
  const elapsed = Date.now() - started;
  assert.ok(elapsed >= 450 && elapsed < 3000, `timed out after ${elapsed} ms`);
  assert.equal(server.connections[0].received.length, 1, 'the request was sent');
  // The connection is dead now: later calls say so at once.
  await assert.rejects(client.health(), (e) => e instanceof ConnectionClosedError && e.cause instanceof TimeoutError);
});

test('answers that keep coming reset the timeout: slow but steady is not a timeout', async () => {
  // Answers come 300 ms apart (under the 500 ms timeout); five of them take 1.5 s in all.
  const server = await serve((frame, conn) => setTimeout(() => conn.socket.write(FRAMES.ack()), 300 * (conn.received.length)));
  const client = await connect(server.path, { timeoutMs: 500 });
  const all = [];
  for (let i = 0; i < 5; i++) all.push(client.push(Tier.Sync, `r${i}`));
  await Promise.all(all);
  client.destroy();
});

test('a daemon that closes after half a frame: protocol error', async () => {
  const server = await serve((frame, conn) => conn.socket.end(FRAMES.ack().subarray(0, 10)));
  const client = await connect(server.path, SHORT);
  await assert.rejects(client.push(Tier.Sync, 'hello'), (e) => {
    assert.ok(e instanceof ProtocolError, `got ${e}`);
    assert.match(e.message, /closed the connection in the middle of a frame \(10 bytes of it received\)/);
    return true;
  });
});

test('a daemon that closes after a header and part of the payload: protocol error', async () => {
  const server = await serve((frame, conn) => conn.socket.end(FRAMES.ackBatch(1).subarray(0, 18)));
  const client = await connect(server.path, SHORT);
  await assert.rejects(client.pushBatch(Tier.Sync, ['a']), ProtocolError);
});

test('a daemon that closes without answering: connection closed error', async () => {
  const server = await serve((frame, conn) => conn.socket.end());
  const client = await connect(server.path, SHORT);
  await assert.rejects(client.push(Tier.Sync, 'hello'), (e) => {
    assert.ok(e instanceof ConnectionClosedError, `got ${e}`);
    assert.match(e.message, /connection closed by the daemon with 1 request\(s\) unanswered/);
    return true;
  });
});

test('a daemon that answers garbage: protocol error', async () => {
  const server = await serve((frame, conn) => conn.socket.write('HTTP/1.1 400 Bad Request\r\n\r\n'));
  const client = await connect(server.path, SHORT);
  await assert.rejects(client.push(Tier.Sync, 'hello'), (e) => {
    assert.ok(e instanceof ProtocolError, `got ${e}`);
    assert.match(e.message, /bad magic: bytes 0..4 are 48 54 54 50 \("HTTP"\)/);
    return true;
  });
});

test('a daemon that answers a VersionMismatch nack: nack error, not retryable, connection closed', async () => {
  const server = await serve((frame, conn) => {
    conn.socket.end(FRAMES.versionMismatch());
  });
  const client = await connect(server.path, SHORT);
  const first = client.push(Tier.Sync, 'hello');
  const second = client.push(Tier.Sync, 'world');
  await assert.rejects(first, (e) => {
    assert.ok(e instanceof NackError, `got ${e}`);
    assert.equal(e.reason, 'version_mismatch');
    assert.equal(e.byte, 0x02);
    assert.equal(e.retryable, false);
    assert.equal(e.closesConnection, true);
    assert.equal(e.daemonVersion, 1);
    assert.equal(
      e.message,
      'daemon nacked: version_mismatch (0x02, not retryable: the daemon closes the connection; the daemon speaks protocol version 1)',
    );
    return true;
  });
  await assert.rejects(second, (e) => e instanceof ConnectionClosedError && e.cause instanceof NackError);
  await assert.rejects(client.health(), ConnectionClosedError);
});

for (const [reason, byte] of [
  ['overloaded', 0x0a],
  ['internal_error', 0x06],
]) {
  test(`a daemon that answers ${reason}: nack error, retryable, and the same connection works again`, async () => {
    let refusals = 1;
    const server = await serve((frame, conn) => {
      if (refusals > 0) {
        refusals--;
        conn.socket.write(FRAMES.nack(byte));
      } else if (frame[5] === 0x04) {
        conn.socket.write(FRAMES.healthCheckResponse());
      } else {
        conn.socket.write(FRAMES.ack());
      }
    });
    const client = await connect(server.path, SHORT);
    await assert.rejects(client.push(Tier.Sync, 'hello'), (e) => {
      assert.ok(e instanceof NackError, `got ${e}`);
      assert.equal(e.reason, reason);
      assert.equal(e.byte, byte);
      assert.equal(e.retryable, true);
      assert.equal(e.closesConnection, false);
      assert.equal(e.message, `daemon nacked: ${reason} (0x0${byte.toString(16)}, retryable: back off and resend)`);
      return true;
    });
    await sleep(10); // the back-off
    await client.push(Tier.Sync, 'hello');
    await client.health();
    assert.equal(server.connections.length, 1, 'the same connection');
    assert.equal(server.connections[0].received.length, 3);
    await client.close();
  });
}

test('a HealthCheck answered with Overloaded is a retryable nack error', async () => {
  const server = await serve((frame, conn) => conn.socket.write(FRAMES.nack(0x0a)));
  const client = await connect(server.path, SHORT);
  await assert.rejects(client.health(), (e) => e instanceof NackError && e.retryable && e.reason === 'overloaded');
  client.destroy();
});

test('an AckBatch with the wrong count is a protocol error', async () => {
  const server = await serve((frame, conn) => conn.socket.write(FRAMES.ackBatch(2)));
  const client = await connect(server.path, SHORT);
  await assert.rejects(client.pushBatch(Tier.Sync, ['a', 'b', 'c']), (e) => {
    assert.ok(e instanceof ProtocolError, `got ${e}`);
    assert.match(e.message, /acked 2 records of a 3-record batch/);
    return true;
  });
});

test('a valid response of the wrong type is a protocol error', async () => {
  const server = await serve((frame, conn) => conn.socket.write(frame[5] === 0x04 ? FRAMES.ack() : FRAMES.healthCheckResponse()));
  const client = await connect(server.path, SHORT);
  await assert.rejects(client.push(Tier.Sync, 'x'), /protocol error: the daemon answered health_check_response where ack was expected/);
  const other = await connect(server.path, SHORT);
  await assert.rejects(other.health(), /protocol error: the daemon answered ack where health_check_response was expected/);
});

test('an answer with no request outstanding is a protocol error', async () => {
  const server = await serve(() => {}, { onConnection: (conn) => conn.socket.write(FRAMES.ack()) });
  const client = await connect(server.path, SHORT);
  await sleep(50);
  await assert.rejects(client.push(Tier.Sync, 'x'), (e) => e instanceof ConnectionClosedError && e.cause instanceof ProtocolError);
});

test('every rejected_response vector, sent by a daemon, fails the request with a protocol error (no hang)', async () => {
  const vectors = JSON.parse(fs.readFileSync(VECTORS_PATH, 'utf8')).vectors.filter((v) => v.kind === 'rejected_response');
  assert.equal(vectors.length, 13);
  for (const v of vectors) {
    const server = await serve((frame, conn) => conn.socket.write(Buffer.from(v.frame, 'hex')));
    const client = await connect(server.path, SHORT);
    // A push: most of these frames are damaged Acks, the answer a push expects.
    await assert.rejects(client.push(Tier.Sync, 'x'), (e) => {
      assert.ok(e instanceof ProtocolError, `${v.name} (${v.fault}): got ${e}`);
      // The very fault the decoder finds, not a later symptom.
      assert.throws(() => protocol.decodeResponse(Buffer.from(v.frame, 'hex')), { message: e.message });
      return true;
    });
  }
});

test('answers split across reads, byte by byte, are reassembled', async () => {
  const server = await serve((frame, conn) => {
    const answer = Buffer.concat([FRAMES.ack(), FRAMES.ackBatch(2)]);
    let i = 0;
    const drip = () => {
      if (i < answer.length) {
        conn.socket.write(answer.subarray(i, i + 1));
        i++;
        setTimeout(drip, 1);
      }
    };
    if (conn.received.length === 2) drip();
  });
  const client = await connect(server.path, SHORT);
  const [a, b] = await Promise.all([client.push(Tier.Sync, 'x'), client.pushBatch(Tier.Buffered, ['y', 'z'])]);
  assert.equal(a, undefined);
  assert.equal(b, 2);
  client.destroy();
});

/** A fake daemon that answers nothing until told, recording how many frames it got meanwhile. */
async function holdingDaemon() {
  let held = [];
  const server = await serve((frame, conn) => held.push(conn));
  return {
    server,
    get received() {
      return server.connections.reduce((n, c) => n + c.received.length, 0);
    },
    release() {
      const now = held;
      held = [];
      for (const conn of now) conn.socket.write(FRAMES.ack());
      return now.length;
    },
  };
}

test('the client window caps frames in flight; the rest queue locally', async () => {
  const fake = await holdingDaemon();
  const client = await connect(fake.server.path, { window: 4, timeoutMs: 2000 });
  const all = [];
  for (let i = 0; i < 10; i++) all.push(client.push(Tier.Sync, `r${i}`));
  await sleep(100);
  assert.equal(fake.received, 4, 'only the window is written');
  assert.equal(client.inFlight, 4);
  assert.equal(client.outstanding, 10);
  assert.equal(fake.release(), 4);
  await sleep(100);
  assert.equal(fake.received, 8);
  fake.release();
  await sleep(100);
  assert.equal(fake.received, 10);
  fake.release();
  await Promise.all(all);
  client.destroy();
});

test('a pipeline window caps its frames in flight on a client with a larger window', async () => {
  const fake = await holdingDaemon();
  const client = await connect(fake.server.path, { timeoutMs: 2000 });
  const pipeline = client.pipeline({ window: 3 });
  for (let i = 0; i < 7; i++) pipeline.push(Tier.Buffered, `r${i}`);
  const flushed = pipeline.flush();
  await sleep(100);
  assert.equal(fake.received, 3);
  assert.equal(pipeline.inFlight, 3);
  fake.release();
  await sleep(100);
  assert.equal(fake.received, 6);
  fake.release();
  await sleep(100);
  assert.equal(fake.received, 7);
  fake.release();
  const result = await flushed;
  assert.deepEqual(result.outcomes, [1, 1, 1, 1, 1, 1, 1]);
  client.destroy();
});

test('pipeline flush reports each outcome and the first error in request order', async () => {
  // Answers: ack, overloaded, ack, then hangs up with two requests unanswered.
  const server = await serve((frame, conn) => {
    const n = conn.received.length - 1;
    if (n === 0 || n === 2) conn.socket.write(FRAMES.ack());
    if (n === 1) conn.socket.write(FRAMES.nack(0x0a));
    if (n === 4) conn.socket.end();
  });
  const client = await connect(server.path, SHORT);
  const pipeline = client.pipeline({ window: 16 });
  for (let i = 0; i < 5; i++) pipeline.push(Tier.Sync, `r${i}`);
  const result = await pipeline.flush();
  assert.equal(result.outcomes.length, 5);
  assert.equal(result.outcomes[0], 1);
  assert.ok(result.outcomes[1] instanceof NackError && result.outcomes[1].retryable);
  assert.equal(result.outcomes[2], 1);
  assert.ok(result.outcomes[3] instanceof ConnectionClosedError);
  assert.ok(result.outcomes[4] instanceof ConnectionClosedError);
  assert.equal(result.acked, 2);
  assert.equal(result.failed, 3);
  assert.equal(result.firstError, result.outcomes[1]);
  // A dead connection: the pipeline refuses at once.
  assert.throws(() => pipeline.push(Tier.Sync, 'x'), ConnectionClosedError);
});

test('backpressure: a daemon that stops reading makes the client wait for drain, then everything is acked', async () => {
  let paused = true;
  const waiting = [];
  const server = await serve(
    (frame, conn) => {
      if (paused) waiting.push(conn);
      else conn.socket.write(FRAMES.ack());
    },
    { onConnection: (conn) => conn.socket.pause() },
  );
  const client = await connect(server.path, { timeoutMs: 5000 });
  const record = Buffer.alloc(64 * 1024, 0x61);
  const all = [];
  for (let i = 0; i < 64; i++) all.push(client.push(Tier.Buffered, record));
  await sleep(200);
  assert.ok(client._blocked, 'the socket must be reporting backpressure (4 MiB written to a daemon that does not read)');
  assert.equal(server.connections[0].received.length, 0);
  paused = false;
  server.connections[0].socket.resume();
  await Promise.all(all);
  for (const conn of waiting) conn.socket.write(FRAMES.ack());
  assert.equal(server.connections[0].received.length, 64);
  client.destroy();
});

test('connect to a path where nothing listens fails with the path and the system error', async () => {
  const missing = path.join(dir, 'nobody.sock');
  await assert.rejects(connect(missing, SHORT), (e) => {
    assert.ok(e instanceof SpillwayError, `got ${e}`);
    assert.equal(e.code, 'ENOENT');
    assert.ok(e.message.includes(missing));
    return true;
  });
});

test('destroy fails outstanding requests with a connection closed error', async () => {
  const server = await serve(() => {});
  const client = await connect(server.path, SHORT);
  const pending = client.push(Tier.Sync, 'x');
  await sleep(20);
  client.destroy();
  await assert.rejects(pending, /connection closed by the client/);
});

test('pipeline.ready() waits until answers bring the outstanding count under the limit', async () => {
  const fake = await holdingDaemon();
  const client = await connect(fake.server.path, { timeoutMs: 2000 });
  const pipeline = client.pipeline({ window: 2 });
  for (let i = 0; i < 5; i++) pipeline.push(Tier.Sync, `r${i}`);
  await pipeline.ready(6); // already under 6: resolves at once
  let ready = false;
  const waiting = pipeline.ready(3).then(() => (ready = true));
  await sleep(50);
  assert.equal(ready, false, '5 outstanding, not under 3');
  fake.release(); // 2 answered: 3 outstanding, still not under 3
  await sleep(50);
  assert.equal(ready, false);
  fake.release(); // 4 answered: 1 outstanding
  await waiting;
  assert.equal(pipeline.outstanding, 1);
  // A failed connection settles everything, which also frees the room.
  const stuck = pipeline.ready(1);
  client.destroy();
  await stuck;
  assert.equal((await pipeline.flush()).failed, 1);
});
