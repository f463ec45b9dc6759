package spillway

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Frame layout constants of the weir v1 wire protocol (docs/wire-protocol.md).
const (
	// HeaderLen is the size of a frame header.
	HeaderLen = 16
	// TrailerLen is the size of the payload CRC that ends every frame.
	TrailerLen = 4
	// ProtocolVersion is the only version this client speaks.
	ProtocolVersion = 1
	// PayloadBytesHardMax is the protocol's hard cap on a frame payload
	// (16 MiB). A daemon may be configured with a lower cap.
	PayloadBytesHardMax = 16 * 1024 * 1024
)

var magic = [4]byte{'W', 'E', 'I', 'R'}

// MessageType is byte 5 of a frame header.
type MessageType uint8

// The message types. Push, HealthCheck and PushBatch flow client → daemon;
// the others daemon → client.
const (
	MsgPush                MessageType = 0x01
	MsgAck                 MessageType = 0x02
	MsgNack                MessageType = 0x03
	MsgHealthCheck         MessageType = 0x04
	MsgHealthCheckResponse MessageType = 0x05
	MsgPushBatch           MessageType = 0x06 // spillway extension
	MsgAckBatch            MessageType = 0x07 // spillway extension
)

// String returns the snake_case name used by the protocol docs.
func (m MessageType) String() string {
	switch m {
	case MsgPush:
		return "push"
	case MsgAck:
		return "ack"
	case MsgNack:
		return "nack"
	case MsgHealthCheck:
		return "health_check"
	case MsgHealthCheckResponse:
		return "health_check_response"
	case MsgPushBatch:
		return "push_batch"
	case MsgAckBatch:
		return "ack_batch"
	}
	return fmt.Sprintf("unknown(0x%02x)", uint8(m))
}

// Tier is the durability tier of a push: what its ack promises.
type Tier uint8

const (
	// Sync: acked once fdatasync has returned for the record's bytes.
	Sync Tier = 1
	// Batched: in spillway the same group commit as Sync.
	Batched Tier = 2
	// Buffered: acked once in the page cache; an fsync follows within
	// the daemon's wab.buffered_flush_interval_ms.
	Buffered Tier = 3
)

// String returns "sync", "batched" or "buffered".
func (t Tier) String() string {
	switch t {
	case Sync:
		return "sync"
	case Batched:
		return "batched"
	case Buffered:
		return "buffered"
	}
	return fmt.Sprintf("unknown_tier(0x%02x)", uint8(t))
}

// Valid reports whether t is one of the three tiers.
func (t Tier) Valid() bool { return t >= Sync && t <= Buffered }

// NackReason is the first payload byte of a Nack.
type NackReason uint8

// The nack reasons. Only InternalError and Overloaded are retryable (the
// daemon keeps the connection open); after any other the daemon closes it.
const (
	BadMagic         NackReason = 0x01
	VersionMismatch  NackReason = 0x02
	BadHeaderCrc     NackReason = 0x03
	PayloadTooLarge  NackReason = 0x04
	BadPayloadCrc    NackReason = 0x05
	InternalError    NackReason = 0x06
	EmptyPayload     NackReason = 0x07
	UnknownMessage   NackReason = 0x08
	ReservedFlagsSet NackReason = 0x09
	Overloaded       NackReason = 0x0A // spillway extension
)

var nackNames = [...]string{
	BadMagic:         "bad_magic",
	VersionMismatch:  "version_mismatch",
	BadHeaderCrc:     "bad_header_crc",
	PayloadTooLarge:  "payload_too_large",
	BadPayloadCrc:    "bad_payload_crc",
	InternalError:    "internal_error",
	EmptyPayload:     "empty_payload",
	UnknownMessage:   "unknown_message",
	ReservedFlagsSet: "reserved_flags_set",
	Overloaded:       "overloaded",
}

// Known reports whether r is an assigned reason byte (0x01..=0x0A).
func (r NackReason) Known() bool { return r >= BadMagic && r <= Overloaded }

// String returns the protocol's snake_case name, e.g. "overloaded".
func (r NackReason) String() string {
	if r.Known() {
		return nackNames[r]
	}
	return fmt.Sprintf("unknown_reason(0x%02x)", uint8(r))
}

// Retryable reports whether the same request may be resent on the same
// connection after a back-off (InternalError, Overloaded).
func (r NackReason) Retryable() bool { return r == InternalError || r == Overloaded }

// ClosesConnection reports whether the daemon closes the connection after
// sending this nack (every reason that is not retryable).
func (r NackReason) ClosesConnection() bool { return !r.Retryable() }

// Response is one decoded daemon → client frame.
type Response struct {
	Type MessageType
	// Count is the record count of an AckBatch.
	Count uint32
	// Reason is set for a Nack.
	Reason NackReason
	// DaemonVersion is the daemon's protocol version carried by a
	// VersionMismatch nack (0 when the nack did not carry one).
	DaemonVersion uint8
}

func putHeader(h []byte, t MessageType, tier uint8, payloadLen int) {
	_ = h[15]
	h[0], h[1], h[2], h[3] = 'W', 'E', 'I', 'R'
	h[4] = ProtocolVersion
	h[5] = byte(t)
	h[6] = tier
	h[7] = 0
	binary.LittleEndian.PutUint32(h[8:12], uint32(payloadLen))
	binary.LittleEndian.PutUint32(h[12:16], crc32.ChecksumIEEE(h[:12]))
}

// grow extends dst by n bytes (reusing its capacity) and returns the
// extended slice and the offset where the new bytes start.
func grow(dst []byte, n int) ([]byte, int) {
	off := len(dst)
	if cap(dst)-off < n {
		bigger := make([]byte, off, 2*cap(dst)+n)
		copy(bigger, dst)
		dst = bigger
	}
	return dst[:off+n], off
}

// PushFrameLen is the length of the Push frame carrying a record of n bytes.
func PushFrameLen(n int) int { return HeaderLen + n + TrailerLen }

// PushBatchPayloadLen is the payload length of a PushBatch: 4 + Σ(4 + len).
func PushBatchPayloadLen(records [][]byte) int {
	n := 4
	for _, r := range records {
		n += 4 + len(r)
	}
	return n
}

// AppendPush appends the Push frame for record at tier to dst. It does not
// validate its arguments (Client and Pipeline do, before encoding).
func AppendPush(dst []byte, tier Tier, record []byte) []byte {
	dst, off := grow(dst, PushFrameLen(len(record)))
	f := dst[off:]
	putHeader(f, MsgPush, uint8(tier), len(record))
	copy(f[HeaderLen:], record)
	binary.LittleEndian.PutUint32(f[HeaderLen+len(record):], crc32.ChecksumIEEE(record))
	return dst
}

// AppendPushBatch appends the PushBatch frame for records at tier to dst,
// without per-record allocations. It does not validate its arguments.
func AppendPushBatch(dst []byte, tier Tier, records [][]byte) []byte {
	payloadLen := PushBatchPayloadLen(records)
	dst, off := grow(dst, HeaderLen+payloadLen+TrailerLen)
	f := dst[off:]
	putHeader(f, MsgPushBatch, uint8(tier), payloadLen)
	p := f[HeaderLen : HeaderLen+payloadLen]
	binary.LittleEndian.PutUint32(p, uint32(len(records)))
	i := 4
	for _, r := range records {
		binary.LittleEndian.PutUint32(p[i:], uint32(len(r)))
		i += 4
		i += copy(p[i:], r)
	}
	binary.LittleEndian.PutUint32(f[HeaderLen+payloadLen:], crc32.ChecksumIEEE(p))
	return dst
}

// AppendHealthCheck appends a HealthCheck frame (tier byte 0x01, empty
// payload) to dst.
func AppendHealthCheck(dst []byte) []byte {
	dst, off := grow(dst, HeaderLen+TrailerLen)
	f := dst[off:]
	putHeader(f, MsgHealthCheck, uint8(Sync), 0)
	binary.LittleEndian.PutUint32(f[HeaderLen:], 0)
	return dst
}

// DecodeResponse decodes the response frame at the start of buf.
//
// It returns the response and the number of bytes it used; n == 0 with a
// nil error means buf holds only the beginning of a frame (read more). A
// malformed frame is an error wrapping ErrProtocol: bad magic, version,
// either CRC, non-zero flags, a request or unknown message type, a payload
// length other than the type calls for (judged from the header, before the
// payload arrives) or an unknown nack reason.
func DecodeResponse(buf []byte) (resp Response, n int, err error) {
	// Judge a partial header as far as it goes, so garbage is refused at
	// once instead of after a wait for 16 bytes that may never come.
	for i := 0; i < len(buf) && i < 4; i++ {
		if buf[i] != magic[i] {
			return resp, 0, protocolErrorf("bad magic % x (expected \"WEIR\" = 57 45 49 52)", buf[:min4(len(buf))])
		}
	}
	if len(buf) > 4 && buf[4] != ProtocolVersion {
		return resp, 0, protocolErrorf("unsupported protocol version %d in a response (this client speaks %d)", buf[4], ProtocolVersion)
	}
	if len(buf) < HeaderLen {
		return resp, 0, nil
	}
	if got, want := binary.LittleEndian.Uint32(buf[12:16]), crc32.ChecksumIEEE(buf[:12]); got != want {
		return resp, 0, protocolErrorf("bad header crc 0x%08x (computed 0x%08x)", got, want)
	}
	t := MessageType(buf[5])
	switch t {
	case MsgAck, MsgNack, MsgHealthCheckResponse, MsgAckBatch:
	case MsgPush, MsgHealthCheck, MsgPushBatch:
		return resp, 0, protocolErrorf("message type 0x%02x (%s) is a request, not a response", buf[5], t)
	default:
		return resp, 0, protocolErrorf("unknown message type 0x%02x", buf[5])
	}
	if buf[7] != 0 {
		return resp, 0, protocolErrorf("flags byte is 0x%02x in a %s, must be 0", buf[7], t)
	}
	plen := binary.LittleEndian.Uint32(buf[8:12])
	var lenOK bool
	var want string
	switch t {
	case MsgNack:
		lenOK, want = plen == 1 || plen == 2, "1 or 2"
	case MsgAckBatch:
		lenOK, want = plen == 4, "4"
	default:
		lenOK, want = plen == 0, "0"
	}
	if !lenOK {
		return resp, 0, protocolErrorf("%s declares a %d-byte payload, expected %s", t, plen, want)
	}
	frameLen := HeaderLen + int(plen) + TrailerLen
	if len(buf) < frameLen {
		return resp, 0, nil
	}
	payload := buf[HeaderLen : HeaderLen+int(plen)]
	if got, want := binary.LittleEndian.Uint32(buf[HeaderLen+int(plen):frameLen]), crc32.ChecksumIEEE(payload); got != want {
		return resp, 0, protocolErrorf("bad payload crc 0x%08x in a %s (computed 0x%08x)", got, t, want)
	}
	resp.Type = t
	switch t {
	case MsgAckBatch:
		resp.Count = binary.LittleEndian.Uint32(payload)
	case MsgNack:
		r := NackReason(payload[0])
		if !r.Known() {
			return Response{}, 0, protocolErrorf("nack with unknown reason byte 0x%02x", payload[0])
		}
		if plen == 2 {
			if r != VersionMismatch {
				return Response{}, 0, protocolErrorf("a %s nack carries 2 payload bytes; only version_mismatch carries a second byte", r)
			}
			resp.DaemonVersion = payload[1]
		}
		resp.Reason = r
	}
	return resp, frameLen, nil
}

func min4(n int) int {
	if n < 4 {
		return n
	}
	return 4
}
