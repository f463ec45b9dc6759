// Package spillway is a producer client for the spillway daemon (or any weir
// v1 daemon) over its Unix stream socket (Dial), or over the daemon's TCP
// door, [server.tcp], in the clear (DialTCP) or with TLS (DialTLS).
//
// Client.Push, Client.PushBatch and Client.Health send one request and wait
// for its answer. A Pipeline keeps many requests in flight on the same
// connection and hands the answers back in request order.
//
// A Client is not safe for concurrent use: give each goroutine its own.
package spillway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"time"
)

// DefaultTimeout is the default connect, read and write timeout.
const DefaultTimeout = 10 * time.Second

const (
	readBufSize = 64 * 1024
	// flushBytes: buffered frames are written once they reach this size.
	flushBytes = 64 * 1024
	// directWriteMin: a Push record at least this long is written straight
	// from the caller's slice (writev of header, record, trailer), not copied.
	directWriteMin = 64 * 1024
	// salvageWait: after a failed write, how long to look for the answers
	// (typically the nack explaining the close) the daemon sent before it hung up.
	salvageWait = 100 * time.Millisecond
)

// Options configure a Client. The zero value of each field means its default.
type Options struct {
	// ConnectTimeout bounds the connect (default 10 s).
	ConnectTimeout time.Duration
	// ReadTimeout bounds every wait for an answer (default 10 s). Every read
	// has a deadline: a call never waits longer than this (or its context).
	ReadTimeout time.Duration
	// WriteTimeout bounds every write (default 10 s).
	WriteTimeout time.Duration
	// PayloadBytesMax is the largest payload sent (default 16 MiB, the
	// protocol's hard cap). Set it to the daemon's server.payload_bytes_max
	// if that is lower, so oversized requests are refused locally instead
	// of being nacked (PayloadTooLarge closes the connection).
	PayloadBytesMax int
}

func (o *Options) withDefaults() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.ConnectTimeout <= 0 {
		r.ConnectTimeout = DefaultTimeout
	}
	if r.ReadTimeout <= 0 {
		r.ReadTimeout = DefaultTimeout
	}
	if r.WriteTimeout <= 0 {
		r.WriteTimeout = DefaultTimeout
	}
	if r.PayloadBytesMax == 0 {
		r.PayloadBytesMax = PayloadBytesHardMax
	}
	if r.PayloadBytesMax < 1 || r.PayloadBytesMax > PayloadBytesHardMax {
		return r, fmt.Errorf("spillway: Options.PayloadBytesMax = %d is out of range 1..=%d", r.PayloadBytesMax, PayloadBytesHardMax)
	}
	return r, nil
}

// expect is one request written (or buffered) whose answer is still owed.
type expect struct {
	req     MessageType // MsgPush, MsgPushBatch or MsgHealthCheck
	count   uint32      // records in a PushBatch
	seq     uint64
	pipe    bool // a Pipeline request (its result goes to the ready queue)
	discard bool // its caller gave up (timeout, Abandon): skip the answer
}

func (e expect) wantResponse() MessageType {
	switch e.req {
	case MsgPushBatch:
		return MsgAckBatch
	case MsgHealthCheck:
		return MsgHealthCheckResponse
	}
	return MsgAck
}

// Client is one connection to a daemon. Not safe for concurrent use.
type Client struct {
	nc   net.Conn // a *net.UnixConn, a *net.TCPConn or a *tls.Conn
	raw  net.Conn // under a *tls.Conn, its TCP connection; else nil
	path string   // the socket's path, or tcp://host:port, tls://host:port
	opts Options

	rbuf       []byte // bytes read, rbuf[rpos:rend] not decoded yet
	rpos, rend int
	wbuf       []byte // encoded frames not written yet
	scratch    [HeaderLen + TrailerLen]byte

	pending   ring[expect] // oldest first
	unflushed int          // newest entries of pending whose frames are only in wbuf
	ready     []Result     // pipeline answers not handed out yet
	readyHead int
	owed      int    // pipeline entries in pending that are not discarded
	seq       uint64 // next pipeline sequence number

	// The answer to the single (non-pipelined) request in progress.
	singleDone  bool
	singleErr   error
	singleCount uint32

	broken       error // set once the connection is unusable
	closing      bool  // Close was called (TLS: say close_notify)
	bytesWritten uint64
}

// Dial connects to the daemon listening on the Unix socket at path. opts
// may be nil for the defaults.
func Dial(ctx context.Context, path string, opts *Options) (*Client, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: o.ConnectTimeout}
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("spillway: connecting to %s: %w", path, err)
	}
	return newClient(nc, nil, path, o), nil
}

func newClient(nc, raw net.Conn, path string, o Options) *Client {
	return &Client{
		nc:   nc,
		raw:  raw,
		path: path,
		opts: o,
		rbuf: make([]byte, readBufSize),
		wbuf: make([]byte, 0, flushBytes+4096),
	}
}

// Options returns the options in effect (defaults filled in).
func (c *Client) Options() Options { return c.opts }

// Close closes the connection. Answers still owed are lost: Pipeline
// requests not yet answered get an error wrapping ErrClosed.
func (c *Client) Close() error {
	if c.broken != nil {
		return nil
	}
	c.closing = true
	c.poison(&closedError{why: "closed by Client.Close"})
	return nil
}

// Push stores one record at tier and returns once the daemon has acked it.
//
// A *NackError is the daemon's refusal (retry after a back-off only when
// Retryable()); a *RecordError means nothing was sent. After a timeout the
// record may still be stored; its late answer is skipped by later calls.
func (c *Client) Push(ctx context.Context, tier Tier, record []byte) error {
	if err := c.checkPush(tier, record); err != nil {
		return err
	}
	if err := c.startSingle(ctx); err != nil {
		return err
	}
	c.pending.push(expect{req: MsgPush})
	var err error
	if len(record) >= directWriteMin {
		err = c.writePushDirect(ctx, tier, record)
	} else {
		c.wbuf = AppendPush(c.wbuf, tier, record)
		c.unflushed++
		err = c.flush(ctx, "push: write")
	}
	return c.finishSingle(ctx, "push: wait for ack", err)
}

// PushBatch stores records at tier in one PushBatch frame (spillway's
// extension) and returns the number of records acked, which is always
// len(records): an AckBatch with another count is a protocol error. After
// a nack none of the records counts as acked. A plain weir daemon answers
// with an UnknownMessage nack.
func (c *Client) PushBatch(ctx context.Context, tier Tier, records [][]byte) (int, error) {
	if err := c.checkBatch(tier, records); err != nil {
		return 0, err
	}
	if err := c.startSingle(ctx); err != nil {
		return 0, err
	}
	c.pending.push(expect{req: MsgPushBatch, count: uint32(len(records))})
	c.wbuf = AppendPushBatch(c.wbuf, tier, records)
	c.unflushed++
	err := c.flush(ctx, "push_batch: write")
	if err = c.finishSingle(ctx, "push_batch: wait for ack_batch", err); err != nil {
		return 0, err
	}
	return int(c.singleCount), nil
}

// Health sends a HealthCheck and waits for the HealthCheckResponse. A nack
// answer (InternalError or Overloaded while the daemon's shard cannot
// write) is returned as a *NackError.
func (c *Client) Health(ctx context.Context) error {
	if err := c.startSingle(ctx); err != nil {
		return err
	}
	c.pending.push(expect{req: MsgHealthCheck})
	c.wbuf = AppendHealthCheck(c.wbuf)
	c.unflushed++
	err := c.flush(ctx, "health: write")
	return c.finishSingle(ctx, "health: wait for health_check_response", err)
}

func (c *Client) startSingle(ctx context.Context) error {
	if c.broken != nil {
		return c.broken
	}
	if err := ctx.Err(); err != nil {
		return ctxError("send", ctx)
	}
	// Pipeline frames still buffered go out first, in order.
	if c.unflushed > 0 {
		if err := c.flush(ctx, "pipeline: write"); err != nil {
			return err
		}
	}
	c.singleDone, c.singleErr, c.singleCount = false, nil, 0
	return nil
}

// finishSingle waits for the answer to the single request just written.
// Answers owed to pipeline requests sent before it are queued for the pipeline.
func (c *Client) finishSingle(ctx context.Context, op string, writeErr error) error {
	if writeErr != nil && !c.singleDone {
		c.discardNewest()
		return writeErr
	}
	for !c.singleDone {
		if err := c.answerOne(ctx, op, time.Time{}); err != nil && !c.singleDone {
			c.discardNewest()
			return err
		}
	}
	return c.singleErr
}

// discardNewest marks the newest pending request as abandoned: its answer,
// when it comes, is read and dropped so later answers stay matched.
func (c *Client) discardNewest() {
	if n := c.pending.len(); n > 0 {
		c.pending.at(n - 1).discard = true
	}
}

// checkPush refuses, before anything is sent, a push the daemon would nack.
func (c *Client) checkPush(tier Tier, record []byte) error {
	if !tier.Valid() {
		return &RecordError{Index: -1, Msg: fmt.Sprintf("unknown tier %d (use Sync, Batched or Buffered)", uint8(tier))}
	}
	if len(record) == 0 {
		return &RecordError{Index: 0, Msg: "record 0 is empty (a record is at least 1 byte)"}
	}
	if len(record) > c.opts.PayloadBytesMax {
		return &RecordError{Index: 0, Len: len(record), Limit: c.opts.PayloadBytesMax,
			Msg: fmt.Sprintf("record 0: push payload of %d bytes exceeds payload_bytes_max %d", len(record), c.opts.PayloadBytesMax)}
	}
	return nil
}

// checkBatch refuses, before anything is sent, a batch the daemon would nack.
func (c *Client) checkBatch(tier Tier, records [][]byte) error {
	if !tier.Valid() {
		return &RecordError{Index: -1, Msg: fmt.Sprintf("unknown tier %d (use Sync, Batched or Buffered)", uint8(tier))}
	}
	if len(records) == 0 {
		return &RecordError{Index: -1, Msg: "push_batch with no records"}
	}
	limit := c.opts.PayloadBytesMax
	total, over := 4, -1
	for i, r := range records {
		if len(r) == 0 {
			return &RecordError{Index: i, Msg: fmt.Sprintf("record %d of %d in the batch is empty (a record is at least 1 byte)", i, len(records))}
		}
		total += 4 + len(r)
		if total > limit && over < 0 {
			over = i
		}
	}
	if over >= 0 {
		return &RecordError{Index: over, Len: total, Limit: limit,
			Msg: fmt.Sprintf("push_batch payload of %d bytes (4 + Σ(4 + len) over %d records) exceeds payload_bytes_max %d; the limit is crossed at record %d", total, len(records), limit, over)}
	}
	return nil
}

// deadline is now+d, or the context's deadline if that is earlier.
func deadline(ctx context.Context, d time.Duration) (dl time.Time, fromCtx bool) {
	dl = time.Now().Add(d)
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		return cd, true
	}
	return dl, false
}

var longAgo = time.Unix(1, 0)

// watch interrupts the connection's I/O when ctx is cancelled; the returned
// function stops watching. Contexts that can never be cancelled cost nothing.
func (c *Client) watch(ctx context.Context) func() {
	if ctx.Done() == nil {
		return nil
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			_ = c.nc.SetDeadline(longAgo)
		case <-stop:
		}
	}()
	return func() { close(stop); <-done }
}

// flush writes every buffered frame.
func (c *Client) flush(ctx context.Context, op string) error {
	if len(c.wbuf) == 0 {
		c.unflushed = 0
		return nil
	}
	err := c.write(ctx, op, c.wbuf, nil)
	c.wbuf = c.wbuf[:0]
	c.unflushed = 0
	return err
}

// writePushDirect writes a large Push without copying the record: any
// buffered frames first, then header, record and trailer in one writev.
func (c *Client) writePushDirect(ctx context.Context, tier Tier, record []byte) error {
	if err := c.flush(ctx, "write"); err != nil {
		return err
	}
	h := c.scratch[:HeaderLen]
	t := c.scratch[HeaderLen:]
	putHeader(h, MsgPush, uint8(tier), len(record))
	binary.LittleEndian.PutUint32(t, crc32.ChecksumIEEE(record))
	return c.write(ctx, "push: write", nil, net.Buffers{h, record, t})
}

// write writes b (or bufs) whole. Any failure leaves the connection
// unusable: part of a frame may be on the wire.
func (c *Client) write(ctx context.Context, op string, b []byte, bufs net.Buffers) error {
	if c.broken != nil {
		return c.broken
	}
	dl, fromCtx := deadline(ctx, c.opts.WriteTimeout)
	if err := c.nc.SetWriteDeadline(dl); err != nil {
		c.poison(&closedError{why: "setting the write deadline", cause: err})
		return c.broken
	}
	stop := c.watch(ctx)
	var n int64
	var err error
	if bufs != nil {
		n, err = bufs.WriteTo(c.nc)
	} else {
		var k int
		k, err = c.nc.Write(b)
		n = int64(k)
	}
	if stop != nil {
		stop()
	}
	c.bytesWritten += uint64(n)
	if err == nil {
		return nil
	}
	var out error
	switch {
	case ctx.Err() != nil:
		out = ctxError(op, ctx)
	case errors.Is(err, os.ErrDeadlineExceeded):
		if fromCtx {
			out = &TimeoutError{Op: op}
		} else {
			out = &TimeoutError{Op: op, After: c.opts.WriteTimeout}
		}
	default:
		// The daemon hung up. It may have said why first (a nack): read
		// whatever it sent, matching answers to the requests they belong to.
		c.unflushed = 0
		c.wbuf = c.wbuf[:0]
		short := time.Now().Add(salvageWait)
		for c.broken == nil && c.pending.len() > 0 {
			if c.answerOne(context.Background(), op, short) != nil {
				break
			}
		}
		out = &closedError{why: "the daemon closed the connection (" + op + ")", cause: err}
	}
	c.poison(out)
	return out
}

// answerOne reads the next answer and settles the oldest pending request
// with it. It returns an error only when no answer could be read (the
// connection failed, or the wait timed out: then nothing is settled).
// A zero dl means now + ReadTimeout (or the context's deadline).
func (c *Client) answerOne(ctx context.Context, op string, dl time.Time) error {
	if c.broken != nil {
		return c.broken
	}
	resp, err := c.readResponse(ctx, op, dl)
	if err != nil {
		if _, isTimeout := err.(*TimeoutError); !isTimeout && ctx.Err() == nil {
			c.poison(err)
		}
		return err
	}
	return c.settleResponse(resp)
}

// answerBuffered settles the oldest pending request if its whole answer is
// already in the read buffer (no system call); it reports whether it did.
func (c *Client) answerBuffered() (bool, error) {
	if c.broken != nil || c.pending.len() == 0 || c.rend == c.rpos {
		return false, nil
	}
	resp, n, err := DecodeResponse(c.rbuf[c.rpos:c.rend])
	if err != nil {
		c.poison(err)
		return false, err
	}
	if n == 0 {
		return false, nil
	}
	c.rpos += n
	if c.rpos == c.rend {
		c.rpos, c.rend = 0, 0
	}
	return true, c.settleResponse(resp)
}

// settleResponse settles the oldest pending request with resp.
func (c *Client) settleResponse(resp Response) error {
	if c.pending.len() == 0 {
		err := protocolErrorf("daemon sent a %s with no request outstanding", resp.Type)
		c.poison(err)
		return err
	}
	e := c.pending.pop()
	if e.pipe && !e.discard {
		c.owed--
	}
	want := e.wantResponse()
	switch {
	case resp.Type == MsgNack:
		ne := newNackError(resp)
		c.settle(e, ne, 0)
		if ne.ClosesConnection() {
			c.poison(&closedError{why: fmt.Sprintf("the daemon closed the connection after nacking a request with %s (0x%02x)", ne.Reason, ne.Byte)})
		}
	case resp.Type != want:
		perr := protocolErrorf("daemon answered a %s with a %s (expected %s)", e.req, resp.Type, want)
		c.settle(e, perr, 0)
		c.poison(perr)
	case want == MsgAckBatch && resp.Count != e.count:
		perr := protocolErrorf("daemon acked a push_batch of %d records with an ack_batch count of %d", e.count, resp.Count)
		c.settle(e, perr, 0)
		c.poison(perr)
	default:
		n := uint32(0)
		switch want {
		case MsgAck:
			n = 1
		case MsgAckBatch:
			n = resp.Count
		}
		c.settle(e, nil, n)
	}
	return nil
}

// settle hands a request's outcome to whoever waits for it.
func (c *Client) settle(e expect, err error, count uint32) {
	switch {
	case e.discard:
	case e.pipe:
		c.ready = append(c.ready, Result{Seq: e.seq, Request: e.req, Count: int(count), Err: err})
	default:
		c.singleDone, c.singleErr, c.singleCount = true, err, count
	}
}

// poison marks the connection unusable, closes it, and fails every request
// still owed an answer with err.
func (c *Client) poison(err error) {
	if c.broken != nil {
		return
	}
	var ce *closedError
	if errors.As(err, &ce) {
		c.broken = err
	} else {
		c.broken = &closedError{why: "the connection is unusable after an earlier error; reconnect", cause: err}
	}
	for c.pending.len() > 0 {
		e := c.pending.pop()
		c.settle(e, err, 0)
	}
	c.owed = 0
	c.unflushed = 0
	c.wbuf = c.wbuf[:0]
	if c.raw != nil && !c.closing {
		// After a failure, skip TLS's close_notify: writing it could wait
		// (up to 5 s) on a daemon that no longer reads.
		_ = c.raw.Close()
		return
	}
	_ = c.nc.Close()
}

// readResponse returns the next response frame, reading as needed.
func (c *Client) readResponse(ctx context.Context, op string, dl time.Time) (Response, error) {
	fromCtx := false
	for {
		if c.rend > c.rpos {
			resp, n, err := DecodeResponse(c.rbuf[c.rpos:c.rend])
			if err != nil {
				return resp, err
			}
			if n > 0 {
				c.rpos += n
				if c.rpos == c.rend {
					c.rpos, c.rend = 0, 0
				}
				return resp, nil
			}
		}
		if dl.IsZero() {
			dl, fromCtx = deadline(ctx, c.opts.ReadTimeout)
		}
		if err := c.fill(ctx, op, dl, fromCtx); err != nil {
			return Response{}, err
		}
	}
}

// fill does one read into the free end of the read buffer.
func (c *Client) fill(ctx context.Context, op string, dl time.Time, fromCtx bool) error {
	if c.rpos > 0 && len(c.rbuf)-c.rend < 4096 {
		c.rend = copy(c.rbuf, c.rbuf[c.rpos:c.rend])
		c.rpos = 0
	}
	if c.rend == len(c.rbuf) {
		return protocolErrorf("%d bytes from the daemon hold no complete frame", c.rend-c.rpos)
	}
	if err := c.nc.SetReadDeadline(dl); err != nil {
		return &closedError{why: "setting the read deadline", cause: err}
	}
	stop := c.watch(ctx)
	n, err := c.nc.Read(c.rbuf[c.rend:])
	if stop != nil {
		stop()
	}
	c.rend += n
	if n > 0 {
		return nil
	}
	switch {
	case err == nil:
		return nil
	case err == io.EOF:
		if part := c.rend - c.rpos; part > 0 {
			what := "a frame whose header is incomplete"
			if part >= HeaderLen {
				what = fmt.Sprintf("a %d-byte frame", HeaderLen+int(binary.LittleEndian.Uint32(c.rbuf[c.rpos+8:]))+TrailerLen)
			}
			return &ProtocolError{MidFrame: true, Msg: fmt.Sprintf("the daemon closed the connection %d bytes into %s", part, what)}
		}
		return &closedError{why: "the daemon closed the connection (end of file)"}
	case ctx.Err() != nil:
		return ctxError(op, ctx)
	case errors.Is(err, os.ErrDeadlineExceeded):
		if fromCtx {
			return &TimeoutError{Op: op}
		}
		return &TimeoutError{Op: op, After: c.opts.ReadTimeout}
	default:
		return &closedError{why: "reading from the daemon", cause: err}
	}
}
