package spillway_test

// The TCP door ([server.tcp]) of the real daemon: the same protocol as on
// the Unix socket, in the clear on loopback (DialTCP) and over mutual TLS
// (DialTLS). Each test starts a daemon of its own; the certificates are
// made at run time with the openssl command-line tool.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	spillway "github.com/spillway-rs/spillway/clients/go"
)

const allowedName = "producer.example"

// doorDaemon is a daemon started for one test, with a [server.tcp] table.
type doorDaemon struct {
	dir       string
	socket    string
	admin     string
	delivered string
	stderr    string
	port      int
	certs     map[string]string // name -> path without .crt/.key
}

func (d *doorDaemon) addr(host string) string { return net.JoinHostPort(host, strconv.Itoa(d.port)) }

// freePort binds 127.0.0.1:0, reads the port and closes the listener.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// newDoorDaemon makes the daemon's folder (certificates go there before
// the start) and picks its port.
func newDoorDaemon(t *testing.T) *doorDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "spillway-go-tcp-") // mode 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon folder kept for inspection: %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return &doorDaemon{
		dir:       dir,
		socket:    filepath.Join(dir, "spillway.sock"),
		admin:     filepath.Join(dir, "admin.sock"),
		delivered: filepath.Join(dir, "delivered.ndjson"),
		stderr:    filepath.Join(dir, "daemon.stderr"),
		port:      freePort(t),
	}
}

// start runs the daemon on the test config plus tcpTable and waits until
// it answers a health check on its Unix socket (its TCP door is bound
// before that). It is stopped with SIGTERM when the test ends.
func (d *doorDaemon) start(t *testing.T, tcpTable string) {
	t.Helper()
	config := filepath.Join(d.dir, "spillway.toml")
	text := strings.ReplaceAll(configTemplate, "{{tmp}}", d.dir) + tcpTable
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, err := os.Create(filepath.Join(d.dir, "daemon.stdout"))
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(d.stderr)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Getenv("SPILLWAY_BIN"), "run", "--config", config)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); stdout.Close(); stderr.Close(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
			t.Errorf("the daemon had exited before the end of the test (%v); its stderr:\n%s", cmd.ProcessState, d.readStderr())
			return
		default:
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("the daemon ignored SIGTERM for 10 s and was killed")
		}
	})
	limit := time.Now().Add(15 * time.Second)
	var last error
	for time.Now().Before(limit) {
		select {
		case <-exited:
			t.Fatalf("the daemon exited at start (%v); its stderr:\n%s", cmd.ProcessState, d.readStderr())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := spillway.Dial(ctx, d.socket, &spillway.Options{ReadTimeout: time.Second})
		if err == nil {
			err = c.Health(ctx)
			c.Close()
		}
		cancel()
		if last = err; err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the daemon did not answer a health check within 15 s (last: %v); its stderr:\n%s", last, d.readStderr())
}

func (d *doorDaemon) readStderr() string {
	b, _ := os.ReadFile(d.stderr)
	return string(b)
}

// stat is one counter of `spillway ctl stats`.
func (d *doorDaemon) stat(t *testing.T, key string) uint64 {
	t.Helper()
	out, err := exec.Command(os.Getenv("SPILLWAY_BIN"), "ctl", "--admin-socket", d.admin, "stats", "--flat").CombinedOutput()
	if err != nil {
		t.Fatalf("ctl stats: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if i := strings.LastIndexByte(line, ' '); i > 0 && strings.TrimSpace(line[:i]) == key {
			n, err := strconv.ParseUint(line[i+1:], 10, 64)
			if err != nil {
				t.Fatalf("ctl stats: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in ctl stats:\n%s", key, out)
	return 0
}

// -- certificates ---------------------------------------------------------

func openssl(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("openssl", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func makeCA(t *testing.T, dir, name, cn string) {
	openssl(t, dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
		"-keyout", name+".key", "-out", name+".crt", "-days", "2", "-subj", "/CN="+cn)
}

// makeLeaf writes name.crt and name.key, signed by ca, with subjectAltName san.
func makeLeaf(t *testing.T, dir, name, ca, san, usage string) {
	ext := fmt.Sprintf("basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\nextendedKeyUsage = %s\nsubjectAltName = %s\n", usage, san)
	if err := os.WriteFile(filepath.Join(dir, name+".ext"), []byte(ext), 0o600); err != nil {
		t.Fatal(err)
	}
	openssl(t, dir, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
		"-keyout", name+".key", "-out", name+".csr", "-subj", "/CN="+name)
	openssl(t, dir, "x509", "-req", "-in", name+".csr", "-CA", ca+".crt", "-CAkey", ca+".key",
		"-set_serial", strconv.FormatInt(time.Now().UnixNano(), 10), "-days", "2", "-extfile", name+".ext", "-out", name+".crt")
}

// makeCerts: a server CA and the daemon's certificate for localhost and
// 127.0.0.1; a client CA and, signed by it, a certificate with the
// allowed name (producer) and one without (intruder); and a client
// certificate with the allowed name signed by the server CA (stranger).
func (d *doorDaemon) makeCerts(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("the openssl command-line tool is needed to make the TLS tests' certificates: ", err)
	}
	makeCA(t, d.dir, "server-ca", "spillway test server CA")
	makeCA(t, d.dir, "client-ca", "spillway test client CA")
	makeLeaf(t, d.dir, "server", "server-ca", "DNS:localhost, IP:127.0.0.1", "serverAuth")
	makeLeaf(t, d.dir, "producer", "client-ca", "DNS:"+allowedName, "clientAuth")
	makeLeaf(t, d.dir, "intruder", "client-ca", "DNS:intruder.example", "clientAuth")
	makeLeaf(t, d.dir, "stranger", "server-ca", "DNS:"+allowedName, "clientAuth")
	d.certs = map[string]string{}
	for _, n := range []string{"server-ca", "client-ca", "server", "producer", "intruder", "stranger"} {
		d.certs[n] = filepath.Join(d.dir, n)
	}
}

// tlsConfig trusts the server CA and presents who's certificate ("" for none).
func (d *doorDaemon) tlsConfig(t *testing.T, who string) *tls.Config {
	t.Helper()
	cert, key := "", ""
	if who != "" {
		cert, key = d.certs[who]+".crt", d.certs[who]+".key"
	}
	cfg, err := spillway.TLSConfig(d.certs["server-ca"]+".crt", cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func startMutualTLSDaemon(t *testing.T) *doorDaemon {
	d := newDoorDaemon(t)
	d.makeCerts(t)
	d.start(t, fmt.Sprintf("[server.tcp]\nlisten = %q\ncert_file = %q\nkey_file = %q\nca_file = %q\nallowed_names = [%q]\n",
		d.addr("127.0.0.1"), d.certs["server"]+".crt", d.certs["server"]+".key", d.certs["client-ca"]+".crt", allowedName))
	return d
}

// -- the same protocol over the door ----------------------------------------

// speak pushes at every tier, batches at every tier, a mixed pipeline and
// a record large enough to be written from the caller's slice; it returns
// the records sent, in order.
func speak(t *testing.T, c *spillway.Client, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var sent []string
	if err := c.Health(ctx); err != nil {
		t.Fatalf("health: %v", err)
	}
	tiers := []spillway.Tier{spillway.Sync, spillway.Batched, spillway.Buffered}
	for _, tier := range tiers {
		rec := prefix + "-" + tier.String()
		if err := c.Push(ctx, tier, []byte(rec)); err != nil {
			t.Fatalf("push at %s: %v", tier, err)
		}
		sent = append(sent, rec)
	}
	for _, tier := range tiers {
		batch := make([][]byte, 100)
		for i := range batch {
			batch[i] = []byte(fmt.Sprintf("%s-batch-%s-%03d", prefix, tier, i))
			sent = append(sent, string(batch[i]))
		}
		if n, err := c.PushBatch(ctx, tier, batch); err != nil || n != 100 {
			t.Fatalf("push_batch at %s: %d, %v", tier, n, err)
		}
	}
	p := c.Pipeline(32)
	var want []int
	for i := 0; i < 500; i++ {
		var err error
		switch {
		case i%50 == 7:
			batch := make([][]byte, 5)
			for j := range batch {
				batch[j] = []byte(fmt.Sprintf("%s-pb-%03d-%d", prefix, i, j))
				sent = append(sent, string(batch[j]))
			}
			err = p.SendPushBatch(ctx, spillway.Buffered, batch)
			want = append(want, 5)
		case i%50 == 9:
			err = p.SendHealth(ctx)
			want = append(want, 0)
		case i == 250:
			big := fmt.Sprintf("%s-big-%s", prefix, strings.Repeat("b", 200000))
			err = p.SendPush(ctx, spillway.Sync, []byte(big))
			sent = append(sent, big)
			want = append(want, 1)
		default:
			rec := fmt.Sprintf("%s-p-%03d", prefix, i)
			err = p.SendPush(ctx, tiers[i%3], []byte(rec))
			sent = append(sent, rec)
			want = append(want, 1)
		}
		if err != nil {
			t.Fatalf("pipeline send %d: %v", i, err)
		}
	}
	results, err := p.Flush(ctx)
	if err != nil {
		t.Fatalf("pipeline flush: %v", err)
	}
	if len(results) != len(want) {
		t.Fatalf("%d pipeline results, want %d", len(results), len(want))
	}
	for i, r := range results {
		if r.Err != nil || r.Count != want[i] || (i > 0 && r.Seq != results[i-1].Seq+1) {
			t.Fatalf("pipeline result %d: %+v, want count %d", i, r, want[i])
		}
	}
	big := prefix + "-max-" + strings.Repeat("m", daemonCap-len(prefix)-5)
	if err := c.Push(ctx, spillway.Sync, []byte(big)); err != nil {
		t.Fatalf("a push of payload_bytes_max bytes: %v", err)
	}
	sent = append(sent, big)
	if err := c.Health(ctx); err != nil {
		t.Fatalf("health: %v", err)
	}
	return sent
}

func TestTCPInTheClear(t *testing.T) {
	d := newDoorDaemon(t)
	d.start(t, fmt.Sprintf("[server.tcp]\nlisten = %q\ntls = false\n", d.addr("127.0.0.1")))
	ctx := context.Background()
	c, err := spillway.DialTCP(ctx, d.addr("127.0.0.1"), &spillway.Options{PayloadBytesMax: daemonCap})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, isTLS := spillway.TLSState(c); isTLS {
		t.Fatal("DialTCP made a TLS connection")
	}
	prefix := runID + "-tcp"
	sent := speak(t, c, prefix)
	c.Close()
	if err := c.Health(ctx); !errors.Is(err, spillway.ErrClosed) {
		t.Fatalf("a call after Close: %v", err)
	}
	waitDeliveredIn(t, d.delivered, prefix, sent)

	// The clear door does not speak TLS: the handshake fails, at once.
	cfg, err := spillway.TLSConfig("", "", "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if c, err := spillway.DialTLS(ctx, d.addr("127.0.0.1"), cfg, &spillway.Options{ConnectTimeout: 5 * time.Second}); err == nil {
		c.Close()
		t.Fatal("a TLS handshake with the clear door succeeded")
	} else if !strings.Contains(err.Error(), "tls://127.0.0.1:") || time.Since(start) > 4*time.Second {
		t.Fatalf("TLS to the clear door: %v after %v", err, time.Since(start))
	}
	// Nothing listens on a fresh port.
	port := freePort(t)
	if _, err := spillway.DialTCP(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil); err == nil || !strings.Contains(err.Error(), "tcp://127.0.0.1:") {
		t.Fatalf("dialing a port nobody listens on: %v", err)
	}
	if _, err := spillway.DialTCP(ctx, d.addr("127.0.0.1"), &spillway.Options{PayloadBytesMax: -1}); err == nil {
		t.Fatal("a bad PayloadBytesMax was accepted")
	}
}

func TestTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := spillway.TLSConfig(filepath.Join(dir, "missing.crt"), "", ""); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
	junk := filepath.Join(dir, "junk.crt")
	os.WriteFile(junk, []byte("not a certificate\n"), 0o600)
	if _, err := spillway.TLSConfig(junk, "", ""); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a CA file without certificates: %v", err)
	}
	if _, err := spillway.TLSConfig("", junk, ""); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
	if _, err := spillway.TLSConfig("", junk, junk); err == nil {
		t.Fatal("a junk key pair was accepted")
	}
	cfg, err := spillway.TLSConfig("", "", "")
	if err != nil || cfg.RootCAs != nil || len(cfg.Certificates) != 0 || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("TLSConfig with no files: %+v, %v", cfg, err)
	}
}

func TestMutualTLS(t *testing.T) {
	d := startMutualTLSDaemon(t)
	ctx := context.Background()
	opts := &spillway.Options{PayloadBytesMax: daemonCap, ConnectTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second}

	for _, host := range []string{"localhost", "127.0.0.1"} {
		t.Run("good client via "+host, func(t *testing.T) {
			c, err := spillway.DialTLS(ctx, d.addr(host), d.tlsConfig(t, "producer"), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			state, isTLS := spillway.TLSState(c)
			if !isTLS || !state.HandshakeComplete || len(state.PeerCertificates) == 0 {
				t.Fatalf("not a completed TLS connection: %v %+v", isTLS, state)
			}
			if err := state.PeerCertificates[0].VerifyHostname(host); err != nil {
				t.Fatal(err)
			}
			prefix := runID + "-tls-" + host
			sent := speak(t, c, prefix)
			waitDeliveredIn(t, d.delivered, prefix, sent)
		})
	}

	for _, tc := range []struct{ name, who, reason string }{
		{"no certificate", "", "no_client_certificate"},
		{"a certificate without the allowed name", "intruder", "name_not_allowed"},
		// crypto/tls presents Certificates only when they chain to one of
		// the CAs the daemon names in its CertificateRequest (the client
		// CA): this one does not, so the client sends none.
		{"a certificate from another CA", "stranger", "no_client_certificate"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			key := fmt.Sprintf("tcp_tls_handshakes_failed{reason=%q}", tc.reason)
			before := d.stat(t, key)
			rec := fmt.Sprintf("%s-refused-%s", runID, tc.who)
			start := time.Now()
			c, err := spillway.DialTLS(ctx, d.addr("localhost"), d.tlsConfig(t, tc.who), opts)
			if err == nil {
				// TLS 1.3: the daemon checks the client's certificate after
				// the client's half of the handshake; the first call sees it.
				err = c.Push(ctx, spillway.Sync, []byte(rec))
				if err == nil {
					err = c.Health(ctx)
				}
				c.Close()
				if err != nil && !errors.Is(err, spillway.ErrClosed) {
					t.Fatalf("refused after the handshake with %v, want an error wrapping ErrClosed", err)
				}
			}
			if err == nil {
				t.Fatal("a client the daemon must refuse had its push acked")
			}
			var te *spillway.TimeoutError
			if errors.As(err, &te) || time.Since(start) > 4*time.Second {
				t.Fatalf("the refusal was not prompt (%v): %v", time.Since(start), err)
			}
			t.Logf("refused: %v", err)
			// Refused for that reason (counted before the daemon hangs up,
			// but the client may read its alert first: allow a moment).
			limit := time.Now().Add(5 * time.Second)
			for d.stat(t, key) != before+1 && time.Now().Before(limit) {
				time.Sleep(50 * time.Millisecond)
			}
			if got := d.stat(t, key); got != before+1 {
				t.Fatalf("%s went from %d to %d", key, before, got)
			}
			// Nothing of it landed: a good client's later record is
			// delivered (one shard: in order), the refused one is not.
			good, err := spillway.DialTLS(ctx, d.addr("localhost"), d.tlsConfig(t, "producer"), opts)
			if err != nil {
				t.Fatal(err)
			}
			marker := rec + "-marker"
			if err := good.Push(ctx, spillway.Sync, []byte(marker)); err != nil {
				t.Fatal(err)
			}
			good.Close()
			waitDeliveredIn(t, d.delivered, marker, []string{marker})
			waitDeliveredIn(t, d.delivered, rec, []string{marker})
		})
	}

	t.Run("the daemon's certificate must verify", func(t *testing.T) {
		wrong := d.tlsConfig(t, "producer")
		pool := x509.NewCertPool()
		pem, _ := os.ReadFile(d.certs["client-ca"] + ".crt")
		pool.AppendCertsFromPEM(pem)
		wrong.RootCAs = pool
		if _, err := spillway.DialTLS(ctx, d.addr("localhost"), wrong, opts); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("trusting another CA: %v", err)
		}
		other := d.tlsConfig(t, "producer")
		other.ServerName = "elsewhere.example"
		if _, err := spillway.DialTLS(ctx, d.addr("127.0.0.1"), other, opts); err == nil || !strings.Contains(err.Error(), "elsewhere.example") {
			t.Fatalf("a name the certificate does not carry: %v", err)
		}
		if _, err := spillway.DialTLS(ctx, d.addr("localhost"), nil, opts); err == nil {
			t.Fatal("the system's CAs trusted the test CA")
		}
		// ServerName names the certificate's name when dialing another.
		named := d.tlsConfig(t, "producer")
		named.ServerName = "localhost"
		c, err := spillway.DialTLS(ctx, d.addr("127.0.0.1"), named, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Health(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
