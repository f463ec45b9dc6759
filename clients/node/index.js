'use strict';
// spillway-client: a producer client for the spillway daemon (weir v1 wire
// protocol + PushBatch/AckBatch/Overloaded) over a Unix socket. CommonJS,
// no dependencies.

const { connect, Client, DEFAULTS } = require('./lib/client');
const { Pipeline } = require('./lib/pipeline');
const errors = require('./lib/errors');
const protocol = require('./lib/protocol');

module.exports = {
  connect,
  Client,
  Pipeline,
  DEFAULTS,
  Tier: protocol.Tier,
  NackReason: protocol.NackReason,
  PAYLOAD_BYTES_HARD_MAX: protocol.PAYLOAD_BYTES_HARD_MAX,
  ...errors,
  protocol,
};
