'use strict';
// Bench: pushes 5-byte records to the daemon at $SPILLWAY_SOCKET and prints
// one line per scenario:
//   client=node scenario=<name> records=<N> seconds=<S> records_per_s=<R>
// Scenarios, in order:
//   serial_sync         2,000 Sync pushes, each awaited before the next
//   pipelined_sync_w64  50,000 Sync pushes through a Pipeline, 64 in flight
//   batch256_buffered   2,000,000 records as PushBatch frames of 256 at tier
//                       Buffered, through a Pipeline with 8 frames in flight
// Each scenario uses a fresh connection; connecting is not timed.

const { connect, Tier } = require('.');

const RECORD = Buffer.from('hello');

function line(scenario, records, seconds) {
  const rate = Math.round(records / seconds);
  process.stdout.write(`client=node scenario=${scenario} records=${records} seconds=${seconds.toFixed(3)} records_per_s=${rate}\n`);
}

async function timed(socketPath, scenario, records, body) {
  const client = await connect(socketPath);
  try {
    await client.health();
    const started = process.hrtime.bigint();
    await body(client);
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    line(scenario, records, seconds);
  } finally {
    await client.close();
  }
}

async function serialSync(client, n) {
  for (let i = 0; i < n; i++) await client.push(Tier.Sync, RECORD);
}

/**
 * Keeps `window` frames on the wire and up to as many again encoded and
 * waiting, so the next frames are ready the moment answers free the window.
 */
async function pipelined(client, window, frames, send) {
  const pipeline = client.pipeline({ window });
  for (let i = 0; i < frames; i++) {
    if (pipeline.outstanding >= 2 * window) await pipeline.ready(window);
    send(pipeline, i);
  }
  const result = await pipeline.flush();
  if (result.firstError) throw result.firstError;
  return result.acked;
}

async function main() {
  const socketPath = process.env.SPILLWAY_SOCKET;
  if (!socketPath) {
    process.stderr.write('SPILLWAY_SOCKET is not set: point it at a running daemon\'s socket\n');
    process.exit(2);
  }

  const serialN = 2_000;
  await timed(socketPath, 'serial_sync', serialN, (client) => serialSync(client, serialN));

  const pipelinedN = 50_000;
  await timed(socketPath, 'pipelined_sync_w64', pipelinedN, async (client) => {
    const acked = await pipelined(client, 64, pipelinedN, (p) => p.push(Tier.Sync, RECORD));
    if (acked !== pipelinedN) throw new Error(`acked ${acked} of ${pipelinedN}`);
  });

  const batchN = 2_000_000;
  const batchSize = 256;
  const full = new Array(batchSize).fill(RECORD);
  const frames = Math.ceil(batchN / batchSize);
  const last = full.slice(0, batchN - (frames - 1) * batchSize);
  await timed(socketPath, 'batch256_buffered', batchN, async (client) => {
    const acked = await pipelined(client, 8, frames, (p, i) => p.pushBatch(Tier.Buffered, i === frames - 1 ? last : full));
    if (acked !== batchN) throw new Error(`acked ${acked} of ${batchN}`);
  });
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${e.stack || e}\n`);
  process.exit(1);
});
