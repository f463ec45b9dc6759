'use strict';
// Test support: starts the real spillway daemon ($SPILLWAY_BIN) on a fresh
// 0700 temp folder with the config the client's tests are written against,
// waits until it answers a HealthCheck, and stops it with SIGTERM.
//
// Lives outside test/ so that `node --test test/` does not run it as a test file.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');

const { connect } = require('..');

const START_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 10_000;

/** The daemon's payload cap in this config, and therefore the client's payloadBytesMax. */
const DAEMON_PAYLOAD_BYTES_MAX = 1048576;

/** $SPILLWAY_BIN, checked: throws a clear message when it is unset or not an executable file. */
function spillwayBin() {
  const bin = process.env.SPILLWAY_BIN;
  if (!bin) {
    throw new Error('SPILLWAY_BIN is not set: point it at the spillway daemon binary (e.g. SPILLWAY_BIN=/path/to/spillway)');
  }
  let stat;
  try {
    stat = fs.statSync(bin);
  } catch (e) {
    throw new Error(`SPILLWAY_BIN=${bin}: no such file (${e.code})`);
  }
  if (!stat.isFile()) throw new Error(`SPILLWAY_BIN=${bin} is not a file`);
  try {
    fs.accessSync(bin, fs.constants.X_OK);
  } catch {
    throw new Error(`SPILLWAY_BIN=${bin} is not executable`);
  }
  return bin;
}

/** A fresh temp folder, mode 0700. */
function makeTempDir(prefix = 'spillway-node-') {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  fs.chmodSync(dir, 0o700);
  return dir;
}

function configText(dir) {
  return `[server]
socket_path = "${dir}/spillway.sock"
data_dir = "${dir}/wab"
shards = 1
payload_bytes_max = ${DAEMON_PAYLOAD_BYTES_MAX}
[wab]
segment_bytes_max = 4194304
wab_bytes_max = 268435456
[sink]
type = "file"
path = "${dir}/delivered.ndjson"
linger_ms = 5
[admin]
socket_path = "${dir}/admin.sock"
`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Starts a daemon and resolves once it answers a HealthCheck:
 * { dir, socketPath, deliveredPath, stderr(), stop() }.
 */
async function startDaemon() {
  const bin = spillwayBin();
  const dir = makeTempDir();
  const configPath = path.join(dir, 'spillway.toml');
  fs.writeFileSync(configPath, configText(dir));
  const stdoutPath = path.join(dir, 'daemon.stdout');
  const stderrPath = path.join(dir, 'daemon.stderr');
  const out = fs.openSync(stdoutPath, 'w');
  const err = fs.openSync(stderrPath, 'w');
  const child = spawn(bin, ['run', '--config', configPath], { stdio: ['ignore', out, err] });
  fs.closeSync(out);
  fs.closeSync(err);

  let exited = null;
  const exit = new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      exited = { code, signal };
      resolve(exited);
    });
  });
  const stderr = () => {
    try {
      return fs.readFileSync(stderrPath, 'utf8');
    } catch {
      return '';
    }
  };
  const daemon = {
    dir,
    socketPath: path.join(dir, 'spillway.sock'),
    deliveredPath: path.join(dir, 'delivered.ndjson'),
    stderr,
    async stop() {
      if (exited === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
        await exit;
        clearTimeout(timer);
      }
      fs.rmSync(dir, { recursive: true, force: true });
      return exited;
    },
  };

  const deadline = Date.now() + START_TIMEOUT_MS;
  let lastError = null;
  while (Date.now() < deadline) {
    if (exited !== null) break;
    try {
      const client = await connect(daemon.socketPath, { connectTimeoutMs: 1000, timeoutMs: 1000 });
      try {
        await client.health();
        return daemon;
      } finally {
        client.destroy();
      }
    } catch (e) {
      lastError = e;
    }
    await sleep(25);
  }
  const why = exited !== null ? `it exited (${JSON.stringify(exited)})` : `no HealthCheck answer within ${START_TIMEOUT_MS} ms`;
  const log = stderr();
  await daemon.stop();
  throw new Error(`spillway did not start: ${why}; last error: ${lastError && lastError.message}\n--- daemon stderr ---\n${log}`);
}

/** Lines of the file sink's output (each record followed by "\n"). */
function deliveredLines(daemon) {
  let text;
  try {
    text = fs.readFileSync(daemon.deliveredPath, 'latin1');
  } catch {
    return [];
  }
  const lines = text.split('\n');
  lines.pop(); // after the last "\n"
  return lines;
}

/**
 * Polls the delivered file (every 25 ms, up to timeoutMs) until the lines
 * starting with `prefix` number at least `count`; returns them in file order.
 */
async function waitForDelivered(daemon, prefix, count, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  let found = [];
  for (;;) {
    found = deliveredLines(daemon).filter((line) => line.startsWith(prefix));
    if (found.length >= count || Date.now() > deadline) return found;
    await sleep(25);
  }
}

module.exports = {
  DAEMON_PAYLOAD_BYTES_MAX,
  spillwayBin,
  makeTempDir,
  startDaemon,
  deliveredLines,
  waitForDelivered,
  sleep,
};
