// Command spillway-bench measures the Go client against a running daemon
// (SPILLWAY_SOCKET) with 5-byte records and prints one line per scenario:
//
//	client=go scenario=<name> records=<N> seconds=<S> records_per_s=<R>
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	spillway "github.com/spillway-rs/spillway/clients/go"
)

func main() {
	serial := flag.Int("serial", 2000, "records for serial_sync")
	pipelined := flag.Int("pipelined", 50000, "records for pipelined_sync_w64")
	batched := flag.Int("batched", 2000000, "records for batch256_buffered")
	batchWindow := flag.Int("batch-window", 8, "PushBatch frames in flight for batch256_buffered")
	flag.Parse()

	sock := os.Getenv("SPILLWAY_SOCKET")
	if sock == "" {
		fatal(fmt.Errorf("SPILLWAY_SOCKET is not set: set it to a running daemon's socket"))
	}
	ctx := context.Background()
	c, err := spillway.Dial(ctx, sock, nil)
	if err != nil {
		fatal(err)
	}
	defer c.Close()
	if err := c.Health(ctx); err != nil {
		fatal(err)
	}
	rec := []byte("hello")

	run("serial_sync", *serial, func() error {
		for i := 0; i < *serial; i++ {
			if err := c.Push(ctx, spillway.Sync, rec); err != nil {
				return err
			}
		}
		return nil
	})

	run("pipelined_sync_w64", *pipelined, func() error {
		p := c.Pipeline(64)
		for i := 0; i < *pipelined; i++ {
			if err := p.SendPush(ctx, spillway.Sync, rec); err != nil {
				return err
			}
			// Hand results out as they come so none pile up.
			for p.Outstanding() > 64 {
				if r, err := p.Recv(ctx); err != nil {
					return err
				} else if r.Err != nil {
					return r.Err
				}
			}
		}
		_, err := p.Flush(ctx)
		return err
	})

	run("batch256_buffered", *batched, func() error {
		batch := make([][]byte, 256)
		for i := range batch {
			batch[i] = rec
		}
		p := c.Pipeline(*batchWindow)
		for sent := 0; sent < *batched; sent += len(batch) {
			b := batch
			if left := *batched - sent; left < len(b) {
				b = b[:left]
			}
			if err := p.SendPushBatch(ctx, spillway.Buffered, b); err != nil {
				return err
			}
			for p.Outstanding() > *batchWindow {
				if r, err := p.Recv(ctx); err != nil {
					return err
				} else if r.Err != nil {
					return r.Err
				}
			}
		}
		_, err := p.Flush(ctx)
		return err
	})
}

func run(name string, n int, f func() error) {
	start := time.Now()
	if err := f(); err != nil {
		fatal(fmt.Errorf("%s: %w", name, err))
	}
	s := time.Since(start).Seconds()
	fmt.Printf("client=go scenario=%s records=%d seconds=%.3f records_per_s=%.0f\n", name, n, s, float64(n)/s)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "spillway-bench:", err)
	os.Exit(1)
}
