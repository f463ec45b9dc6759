'use strict';
// Every conformance vector of protocol/conformance/vectors.json (read from
// the repository at test time): the encoder against `request` frames, the
// decoder against `response` and `rejected_response` frames, and the real
// daemon against every `request` and `rejected_request` frame sent raw.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const { connect, protocol, ProtocolError, NackError } = require('..');
const { startDaemon, makeTempDir } = require('../test-support/daemon');
const { rawExchange, fakeDaemon } = require('../test-support/sockets');

const VECTORS_PATH = path.join(__dirname, '..', '..', '..', 'protocol', 'conformance', 'vectors.json');
const file = JSON.parse(fs.readFileSync(VECTORS_PATH, 'utf8'));
const vectors = file.vectors;
const ofKind = (kind) => vectors.filter((v) => v.kind === kind);
const hex = (s) => Buffer.from(s, 'hex');

test('the vector file is the one this suite was written for', () => {
  assert.equal(file.format, 1);
  assert.equal(file.protocol_version, protocol.VERSION);
  assert.equal(file.payload_bytes_hard_max, protocol.PAYLOAD_BYTES_HARD_MAX);
  assert.equal(vectors.length, 66);
  const kinds = new Set(vectors.map((v) => v.kind));
  assert.deepEqual([...kinds].sort(), ['rejected_request', 'rejected_response', 'request', 'response']);
});

function encodeRequest(request) {
  switch (request.type) {
    case 'push':
      return protocol.encodePush(request.tier, hex(request.payload));
    case 'push_batch':
      return protocol.encodePushBatch(request.tier, request.records.map(hex));
    case 'health_check':
      return protocol.encodeHealthCheck();
    default:
      throw new Error(`vector request type ${request.type} is unknown to this test`);
  }
}

/** The decoded response in the vector file's own vocabulary. */
function asVectorResponse(r) {
  const out = { type: r.type };
  if (r.type === 'ack_batch') out.count = r.count;
  if (r.type === 'nack') {
    out.reason = r.reason;
    out.reason_byte = r.reasonByte;
    out.retryable = r.retryable;
    out.closes_connection = r.closesConnection;
    if (r.daemonVersion !== undefined) out.daemon_version = r.daemonVersion;
  }
  return out;
}

test.describe('request vectors: the encoder produces exactly `frame`', () => {
  for (const v of ofKind('request')) {
    test(v.name, () => {
      assert.equal(encodeRequest(v.request).toString('hex'), v.frame, v.description);
    });
  }
});

test('the client writes exactly the request vector frames, all in flight at once, and takes their answers', async () => {
  const requests = ofKind('request');
  const dir = makeTempDir('spillway-node-vectors-');
  const server = await fakeDaemon(dir, (frame, conn, n) => conn.socket.write(hex(requests[n].answer)));
  try {
    const client = await connect(server.path, { timeoutMs: 2000 });
    const answers = await Promise.all(
      requests.map(({ request: r }) => {
        if (r.type === 'push') return client.push(r.tier, hex(r.payload));
        if (r.type === 'push_batch') return client.pushBatch(r.tier, r.records.map(hex));
        return client.health();
      }),
    );
    const received = server.connections[0].received;
    assert.equal(received.length, requests.length);
    requests.forEach((v, i) => assert.equal(received[i].toString('hex'), v.frame, v.name));
    requests.forEach((v, i) => assert.equal(answers[i], v.request.type === 'push_batch' ? v.request.records.length : undefined));
    await client.close();
  } finally {
    await server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.describe('response vectors: the decoder yields `response`', () => {
  for (const v of ofKind('response')) {
    test(v.name, () => {
      const frame = hex(v.frame);
      const decoded = protocol.decodeResponse(frame);
      assert.notEqual(decoded, null, 'a whole frame must decode');
      assert.equal(decoded.frameLen, frame.length);
      assert.deepEqual(asVectorResponse(decoded.response), v.response, v.description);
      // Every proper prefix is "need more bytes", never an error or a response.
      for (let n = 0; n < frame.length; n++) {
        assert.equal(protocol.decodeResponse(frame.subarray(0, n)), null, `prefix of ${n} bytes`);
      }
      if (v.response.type === 'nack') {
        const error = new NackError(decoded.response);
        assert.equal(error.reason, v.response.reason);
        assert.equal(error.byte, v.response.reason_byte);
        assert.equal(error.retryable, v.response.retryable);
        const hexByte = '0x' + v.response.reason_byte.toString(16).padStart(2, '0');
        assert.match(error.message, new RegExp(`^daemon nacked: ${v.response.reason} \\(${hexByte}, ${v.response.retryable ? 'retryable' : 'not retryable'}`));
      }
    });
  }
});

test.describe('rejected_response vectors: the decoder raises a protocol error', () => {
  for (const v of ofKind('rejected_response')) {
    test(v.name, () => {
      assert.throws(
        () => protocol.decodeResponse(hex(v.frame)),
        (e) => e instanceof ProtocolError && e.message.startsWith('protocol error: '),
        `${v.description} (fault: ${v.fault})`,
      );
    });
  }
});

test.describe('against the real daemon', () => {
  let daemon;
  test.before(async () => {
    daemon = await startDaemon();
  });
  test.after(async () => {
    if (daemon) await daemon.stop();
  });

  test.describe('request vectors: sent raw, answered with exactly `answer`', () => {
    for (const v of ofKind('request')) {
      test(v.name, async () => {
        const answer = hex(v.answer);
        const got = await rawExchange(daemon.socketPath, hex(v.frame), { wantBytes: answer.length });
        assert.equal(got.timedOut, false, 'the daemon must answer');
        assert.equal(got.data.toString('hex'), v.answer, v.description);
      });
    }
  });

  test.describe('rejected_request vectors: answered with exactly `answer`, then end-of-file', () => {
    for (const v of ofKind('rejected_request')) {
      test(v.name, async () => {
        assert.equal(v.closes_connection, true);
        const got = await rawExchange(daemon.socketPath, hex(v.frame));
        assert.equal(got.timedOut, false, 'the daemon must answer and close');
        assert.equal(got.data.toString('hex'), v.answer, `${v.description} (expected nack ${v.nack.reason})`);
        assert.equal(got.ended, true, 'the daemon closes the connection after the nack');
        const nack = protocol.decodeResponse(got.data).response;
        assert.equal(nack.reason, v.nack.reason);
        assert.equal(nack.reasonByte, v.nack.reason_byte);
      });
    }
  });
});
