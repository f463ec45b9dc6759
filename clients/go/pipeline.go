package spillway

import (
	"context"
	"errors"
	"time"
)

// DefaultWindow is the number of frames a Pipeline keeps in flight by default.
const DefaultWindow = 64

// MaxWindow bounds a Pipeline's window. The daemon's answers to a full
// window (at most 24 bytes each) must fit the socket's receive buffer while
// the client is busy writing, or both sides could wait on each other.
const MaxWindow = 4096

// Result is the outcome of one pipelined request.
type Result struct {
	// Seq numbers the client's pipelined requests from 0, in Send order.
	Seq uint64
	// Request is MsgPush, MsgPushBatch or MsgHealthCheck.
	Request MessageType
	// Count is the number of records acked: 1 for a Push, the batch's size
	// for a PushBatch, 0 for a health check or a failure.
	Count int
	// Err is nil on success, a *NackError when the daemon refused this
	// request, or the connection's error when no answer came (it wraps
	// ErrClosed or ErrProtocol, or is a *TimeoutError from a failed write).
	Err error
}

// Pipeline sends requests without waiting for their answers, keeping up to
// its window of frames in flight on the client's connection. Answers are
// matched to requests by order (the protocol has no request ids).
//
// When the window is full a Send first reads answers (queueing them for
// Recv and Flush), so a Pipeline never deadlocks against the daemon's own
// backpressure. Frames are buffered and written several at a time: when a
// quarter of the window is waiting, when 64 KiB are buffered, and always
// before waiting for an answer (Recv, Flush, a full window).
//
// A Pipeline uses its Client's connection; the Client's own calls may be
// mixed in (they flush the pipeline's frames first). Not safe for
// concurrent use.
type Pipeline struct {
	c          *Client
	window     int
	flushEvery int
}

// Pipeline returns a pipelined sender with up to window frames in flight
// (window <= 0 means DefaultWindow; at most MaxWindow).
func (c *Client) Pipeline(window int) *Pipeline {
	if window <= 0 {
		window = DefaultWindow
	}
	if window > MaxWindow {
		window = MaxWindow
	}
	every := window / 4
	if every < 1 {
		every = 1
	}
	return &Pipeline{c: c, window: window, flushEvery: every}
}

// Window returns the number of frames the pipeline keeps in flight at most.
func (p *Pipeline) Window() int { return p.window }

// Outstanding returns the number of requests sent whose results have not
// been handed out by Recv or Flush yet.
func (p *Pipeline) Outstanding() int { return p.c.owed + len(p.c.ready) - p.c.readyHead }

// SendPush queues a Push of record at tier. A *RecordError means it was
// refused locally and nothing was queued. Any other error is the
// connection's: a timeout or cancellation while waiting for room in the
// window (nothing queued; Send again), or the connection failing (every
// request still owed an answer, possibly this one, gets the error as its
// Result.Err; reconnect).
func (p *Pipeline) SendPush(ctx context.Context, tier Tier, record []byte) error {
	c := p.c
	if err := c.checkPush(tier, record); err != nil {
		return err
	}
	if err := p.makeRoom(ctx); err != nil {
		return err
	}
	if len(record) >= directWriteMin {
		if err := c.flush(ctx, "pipeline: write"); err != nil {
			return err
		}
		p.queued(MsgPush, 0)
		c.unflushed = 0 // written now, not buffered
		return c.writePushDirect(ctx, tier, record)
	}
	c.wbuf = AppendPush(c.wbuf, tier, record)
	p.queued(MsgPush, 0)
	return p.maybeFlush(ctx)
}

// SendPushBatch queues a PushBatch of records at tier; its Result.Count is
// len(records) once acked.
func (p *Pipeline) SendPushBatch(ctx context.Context, tier Tier, records [][]byte) error {
	c := p.c
	if err := c.checkBatch(tier, records); err != nil {
		return err
	}
	if err := p.makeRoom(ctx); err != nil {
		return err
	}
	c.wbuf = AppendPushBatch(c.wbuf, tier, records)
	p.queued(MsgPushBatch, uint32(len(records)))
	return p.maybeFlush(ctx)
}

// SendHealth queues a HealthCheck.
func (p *Pipeline) SendHealth(ctx context.Context) error {
	c := p.c
	if err := p.makeRoom(ctx); err != nil {
		return err
	}
	c.wbuf = AppendHealthCheck(c.wbuf)
	p.queued(MsgHealthCheck, 0)
	return p.maybeFlush(ctx)
}

// Recv returns the result of the oldest request whose result has not been
// handed out, waiting for its answer if needed. The error is non-nil only
// when there is no result to return: nothing is outstanding, or the wait
// timed out or was cancelled (the request stays outstanding: call again).
func (p *Pipeline) Recv(ctx context.Context) (Result, error) {
	c := p.c
	for len(c.ready) == c.readyHead {
		if c.owed == 0 {
			return Result{}, errors.New("spillway: Pipeline.Recv with no request outstanding")
		}
		if err := p.wait(ctx); err != nil {
			return Result{}, err
		}
	}
	r := c.ready[c.readyHead]
	c.ready[c.readyHead] = Result{}
	c.readyHead++
	if c.readyHead == len(c.ready) {
		c.ready, c.readyHead = c.ready[:0], 0
	}
	return r, nil
}

// Flush writes every buffered frame, waits for the answers to every
// outstanding request, and returns their results in request order
// (including those already read but not yet handed out by Recv). The error
// is the first failed result's Err, or the wait's own error (a timeout or
// cancellation; the requests not answered yet stay outstanding and a later
// Flush or Recv collects them).
func (p *Pipeline) Flush(ctx context.Context) ([]Result, error) {
	c := p.c
	var werr error
	if c.broken == nil {
		if err := c.flush(ctx, "pipeline: write"); err != nil && c.broken == nil {
			werr = err
		}
	}
	for werr == nil && c.owed > 0 {
		werr = p.wait(ctx)
	}
	out := c.ready[c.readyHead:]
	c.ready, c.readyHead = nil, 0
	for _, r := range out {
		if r.Err != nil {
			return out, r.Err
		}
	}
	if c.owed == 0 {
		werr = nil // every request was settled (a failure is in its result)
	}
	return out, werr
}

// Abandon gives up every outstanding request: frames still buffered are
// dropped unsent, answers still owed are read and skipped by later calls,
// and results not handed out are discarded.
func (p *Pipeline) Abandon() {
	c := p.c
	for ; c.unflushed > 0; c.unflushed-- {
		n := c.pending.len()
		if n == 0 {
			break
		}
		// Unflushed entries are the newest; their frames never left.
		e := c.pending.at(n - 1)
		if e.pipe && !e.discard {
			c.owed--
		}
		*e = expect{}
		c.pending.n--
	}
	c.wbuf = c.wbuf[:0]
	for i := 0; i < c.pending.len(); i++ {
		e := c.pending.at(i)
		if e.pipe && !e.discard {
			e.discard = true
			c.owed--
		}
	}
	c.ready, c.readyHead = nil, 0
}

func (p *Pipeline) queued(req MessageType, count uint32) {
	c := p.c
	c.pending.push(expect{req: req, count: count, seq: c.seq, pipe: true})
	c.seq++
	c.owed++
	c.unflushed++
}

func (p *Pipeline) maybeFlush(ctx context.Context) error {
	c := p.c
	if c.unflushed >= p.flushEvery || len(c.wbuf) >= flushBytes {
		return c.flush(ctx, "pipeline: write")
	}
	return nil
}

// makeRoom reads answers until a new frame fits in the window.
func (p *Pipeline) makeRoom(ctx context.Context) error {
	c := p.c
	if c.broken != nil {
		return c.broken
	}
	for c.pending.len() >= p.window {
		if err := p.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// wait flushes, then settles at least one request, and every further one
// whose answer is already buffered.
func (p *Pipeline) wait(ctx context.Context) error {
	c := p.c
	if c.broken != nil {
		return c.broken
	}
	if err := c.flush(ctx, "pipeline: write"); err != nil {
		return err
	}
	if err := c.answerOne(ctx, "pipeline: wait for answer", time.Time{}); err != nil {
		return err
	}
	// Answers already read off the socket cost no system call.
	for {
		ok, err := c.answerBuffered()
		if err != nil || !ok {
			return err
		}
	}
}
