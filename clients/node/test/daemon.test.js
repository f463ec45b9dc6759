'use strict';
// The client against the real daemon: every call, the pipelined sender,
// delivery order, and the requests the client must refuse without sending.

const test = require('node:test');
const assert = require('node:assert/strict');

const { connect, Tier, RecordRejectedError, ConnectionClosedError, NackError } = require('..');
const { startDaemon, waitForDelivered, DAEMON_PAYLOAD_BYTES_MAX } = require('../test-support/daemon');

/** A run-unique prefix so a test finds its own records in delivered.ndjson. */
const RUN = `r${process.pid}`;
const pad = (i) => String(i).padStart(5, '0');

let daemon;
test.before(async () => {
  daemon = await startDaemon();
});
test.after(async () => {
  if (daemon) await daemon.stop();
});

/** A client with the daemon's cap as its payload limit. */
const open = (options = {}) => connect(daemon.socketPath, { payloadBytesMax: DAEMON_PAYLOAD_BYTES_MAX, ...options });

test('health answers', async () => {
  const client = await open();
  try {
    assert.equal(await client.health(), undefined);
  } finally {
    await client.close();
  }
});

test('push at each tier is acked and delivered in order', async () => {
  const client = await open();
  const prefix = `${RUN}-tier-`;
  try {
    await client.push(Tier.Sync, `${prefix}sync`);
    await client.push(Tier.Batched, Buffer.from(`${prefix}batched`));
    await client.push(Tier.Buffered, new TextEncoder().encode(`${prefix}buffered`));
    await client.push('sync', `${prefix}by-name`);
  } finally {
    await client.close();
  }
  const lines = await waitForDelivered(daemon, prefix, 4);
  assert.deepEqual(lines, ['sync', 'batched', 'buffered', 'by-name'].map((t) => prefix + t));
});

test('pushBatch of 1 and of 1000 records returns the count; records arrive in order', async () => {
  const client = await open();
  const prefix = `${RUN}-batch-`;
  const records = Array.from({ length: 1000 }, (_, i) => `${prefix}${pad(i)}`);
  try {
    assert.equal(await client.pushBatch(Tier.Sync, [`${prefix}one`]), 1);
    assert.equal(await client.pushBatch(Tier.Batched, records), 1000);
  } finally {
    await client.close();
  }
  const lines = await waitForDelivered(daemon, prefix, 1001);
  assert.deepEqual(lines, [`${prefix}one`, ...records]);
});

test('pipeline: 5000 pushes with window 64, all acked in order and delivered in order', async () => {
  const client = await open();
  const prefix = `${RUN}-pipe-`;
  const sent = Array.from({ length: 5000 }, (_, i) => `${prefix}${pad(i)}`);
  try {
    const pipeline = client.pipeline({ window: 64 });
    let maxInFlight = 0;
    const sampler = setInterval(() => (maxInFlight = Math.max(maxInFlight, pipeline.inFlight)), 1);
    for (let i = 0; i < sent.length; i++) assert.equal(pipeline.push(Tier.Sync, sent[i]), i);
    assert.equal(pipeline.outstanding, 5000);
    const result = await pipeline.flush();
    clearInterval(sampler);
    assert.equal(result.firstError, null);
    assert.equal(result.failed, 0);
    assert.equal(result.acked, 5000);
    assert.equal(result.outcomes.length, 5000);
    assert.ok(result.outcomes.every((o) => o === 1));
    assert.ok(maxInFlight <= 64, `window exceeded: ${maxInFlight} in flight`);
    assert.equal(pipeline.outstanding, 0);
    assert.equal(client.outstanding, 0);
  } finally {
    await client.close();
  }
  const lines = await waitForDelivered(daemon, prefix, 5000);
  assert.equal(lines.length, 5000);
  assert.deepEqual(lines, sent);
});

test('pipeline: pushBatch and health mix; outcomes are record counts', async () => {
  const client = await open();
  try {
    const pipeline = client.pipeline({ window: 8 });
    pipeline.push(Tier.Buffered, 'x');
    pipeline.pushBatch(Tier.Buffered, ['a', 'b', 'c']);
    pipeline.health();
    const result = await pipeline.flush();
    assert.deepEqual(result.outcomes, [1, 3, 0]);
    assert.equal(result.acked, 4);
    // An empty flush resolves at once.
    assert.deepEqual((await pipeline.flush()).outcomes, []);
  } finally {
    await client.close();
  }
});

test('promise API: 3000 pushes without awaiting resolve strictly in request order', async () => {
  const client = await open({ window: 256 });
  const prefix = `${RUN}-promise-`;
  const order = [];
  try {
    const all = [];
    for (let i = 0; i < 3000; i++) {
      all.push(client.push(Tier.Batched, `${prefix}${pad(i)}`).then(() => order.push(i)));
      assert.ok(client.inFlight <= 256);
    }
    await Promise.all(all);
  } finally {
    await client.close();
  }
  assert.deepEqual(order, Array.from({ length: 3000 }, (_, i) => i));
  const lines = await waitForDelivered(daemon, prefix, 3000);
  assert.deepEqual(lines, order.map((i) => `${prefix}${pad(i)}`));
});

test('a record of exactly the cap (1048576 bytes) is accepted', async () => {
  const client = await open();
  try {
    await client.push(Tier.Buffered, Buffer.alloc(DAEMON_PAYLOAD_BYTES_MAX, 0x61));
  } finally {
    await client.close();
  }
});

/** Asserts `promise` rejects with a RecordRejectedError, nothing was written, and the connection still works. */
async function refusedLocally(client, promise, check) {
  const before = client.bytesWritten;
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof RecordRejectedError, `expected RecordRejectedError, got ${e}`);
    check(e);
    return true;
  });
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(client.bytesWritten, before, 'no byte may be sent for a refused request');
  assert.equal(client.outstanding, 0);
  await client.health();
  await client.push(Tier.Sync, 'still works');
}

test('local refusal: empty record, record over the cap, bad batches; nothing sent, connection still works', async () => {
  const client = await open();
  try {
    await refusedLocally(client, client.push(Tier.Sync, Buffer.alloc(0)), (e) => {
      assert.equal(e.index, 0);
      assert.match(e.message, /record 0 is empty/);
    });
    await refusedLocally(client, client.push(Tier.Sync, ''), (e) => assert.equal(e.index, 0));
    await refusedLocally(client, client.push(Tier.Sync, Buffer.alloc(DAEMON_PAYLOAD_BYTES_MAX + 1)), (e) => {
      assert.equal(e.index, 0);
      assert.equal(e.limit, 1048576);
      assert.equal(e.bytes, 1048577);
      assert.match(e.message, /record 0 has 1048577 bytes, over payload_bytes_max 1048576/);
    });
    await refusedLocally(client, client.pushBatch(Tier.Sync, []), (e) => {
      assert.equal(e.index, null);
      assert.match(e.message, /no records/);
    });
    await refusedLocally(client, client.pushBatch(Tier.Sync, ['a', Buffer.alloc(0), 'c']), (e) => {
      assert.equal(e.index, 1);
      assert.match(e.message, /record 1 of 3 is empty/);
    });
    // 4 + (4 + 524288) + (4 + 524288) = 1048588 > 1048576: refused at record 1.
    const half = Buffer.alloc(524288, 0x62);
    await refusedLocally(client, client.pushBatch(Tier.Buffered, [half, half]), (e) => {
      assert.equal(e.index, 1);
      assert.equal(e.limit, 1048576);
      assert.equal(e.bytes, 1048588);
      assert.match(e.message, /at record 1 of 2, over payload_bytes_max 1048576/);
    });
    // The largest batch that fits, 4 + (4 + 1048568) = 1048576, is accepted.
    assert.equal(await client.pushBatch(Tier.Buffered, [Buffer.alloc(1048568, 0x63)]), 1);
    // The pipeline refuses synchronously and queues nothing.
    const pipeline = client.pipeline();
    const before = client.bytesWritten;
    assert.throws(() => pipeline.push(Tier.Sync, ''), RecordRejectedError);
    assert.throws(() => pipeline.pushBatch(Tier.Sync, [half, half]), RecordRejectedError);
    assert.equal(pipeline.outstanding, 0);
    assert.equal(client.bytesWritten, before);
    assert.throws(() => pipeline.push(7, 'x'), TypeError);
    await assert.rejects(client.push(0, 'x'), TypeError);
  } finally {
    await client.close();
  }
});

test('a client whose limit is above the daemon cap gets the daemon nack, then a closed connection', async () => {
  // payloadBytesMax left at the protocol's 16 MiB: the daemon refuses from the header.
  const client = await connect(daemon.socketPath);
  const big = client.push(Tier.Sync, Buffer.alloc(DAEMON_PAYLOAD_BYTES_MAX + 1));
  const after = client.push(Tier.Sync, 'never stored');
  await assert.rejects(big, (e) => {
    // The daemon answers PayloadTooLarge and hangs up, possibly while our
    // write of the payload is still going; then the nack can be lost to EPIPE.
    if (e instanceof NackError) {
      assert.equal(e.reason, 'payload_too_large');
      assert.equal(e.byte, 0x04);
      assert.equal(e.retryable, false);
    } else {
      assert.ok(e instanceof ConnectionClosedError, `got ${e}`);
    }
    return true;
  });
  await assert.rejects(after, ConnectionClosedError);
  await assert.rejects(client.health(), ConnectionClosedError);
  await client.close();
});

test('close waits for outstanding requests, then refuses new ones', async () => {
  const client = await open();
  const pending = [client.push(Tier.Sync, 'c1'), client.push(Tier.Sync, 'c2')];
  const closed = client.close();
  await assert.rejects(client.push(Tier.Sync, 'late'), ConnectionClosedError);
  await Promise.all(pending);
  await closed;
  assert.equal(client.closed, true);
  await assert.rejects(client.health(), ConnectionClosedError);
});
