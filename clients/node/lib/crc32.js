'use strict';
// CRC-32/ISO-HDLC (zlib's crc32), the checksum of both frame CRCs.
//
// Node >= 20.15 has a native zlib.crc32; it is used for anything but tiny
// inputs, where a call into C++ costs more than a few table look-ups.

const zlib = require('node:zlib');

const TABLE = new Int32Array(256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  TABLE[n] = c;
}

/** CRC-32 of buf[start, end) computed in JavaScript. */
function crc32Js(buf, start, end) {
  let c = -1;
  for (let i = start; i < end; i++) c = TABLE[(c ^ buf[i]) & 0xff] ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}

/** Below this many bytes the JavaScript loop beats the native call. */
const NATIVE_FROM_BYTES = 64;

const nativeCrc32 = typeof zlib.crc32 === 'function' ? zlib.crc32 : null;

/** CRC-32 of buf[start, end) as an unsigned 32-bit number. */
function crc32(buf, start = 0, end = buf.length) {
  if (nativeCrc32 !== null && end - start >= NATIVE_FROM_BYTES) {
    return nativeCrc32(buf.subarray(start, end)) >>> 0;
  }
  return crc32Js(buf, start, end);
}

module.exports = { crc32, crc32Js };
