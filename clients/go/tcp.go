package spillway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// DialTCP connects to the daemon's TCP door ([server.tcp]) at addr
// ("host:port") in the clear. The daemon serves the clear only on a
// loopback address (tls = false); anywhere else use DialTLS. The protocol,
// the calls and the Pipeline are the same as over the Unix socket. opts
// may be nil for the defaults; ConnectTimeout bounds the connect.
func DialTCP(ctx context.Context, addr string, opts *Options) (*Client, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: o.ConnectTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("spillway: connecting to tcp://%s: %w", addr, err)
	}
	return newClient(nc, nil, "tcp://"+addr, o), nil
}

// DialTLS connects to the daemon's TCP door ([server.tcp]) at addr
// ("host:port") over TLS; ConnectTimeout bounds the connect and the
// handshake together. opts may be nil for the defaults.
//
// cfg is used as crypto/tls uses it: RootCAs are the CAs the daemon's
// certificate must chain to (nil: the system's), and the daemon's
// certificate must carry cfg.ServerName (when empty, the host of addr, a
// DNS name or an IP address) among its subject alternative names.
// Certificates holds the client's certificate for a daemon that asks for
// one (server.tcp.ca_file, mutual TLS). A nil cfg means the system's
// CAs and no client certificate. TLSConfig builds one from PEM files.
//
// A failed handshake is returned here. With TLS 1.3 the client's half of
// the handshake ends before the daemon has checked the client's
// certificate: a daemon that refuses it (none, another CA, a name not in
// server.tcp.allowed_names) closes the connection, and the first call
// returns an error that wraps ErrClosed.
func DialTLS(ctx context.Context, addr string, cfg *tls.Config, opts *Options) (*Client, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: o.ConnectTimeout}, Config: cfg}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("spillway: connecting to tls://%s: %w", addr, err)
	}
	tc := nc.(*tls.Conn)
	return newClient(tc, tc.NetConn(), "tls://"+addr, o), nil
}

// TLSConfig builds the *tls.Config for DialTLS from PEM files: caFile
// holds the CA certificate(s) the daemon's certificate must chain to (""
// for the system's CAs); certFile (a certificate chain, the client's own
// first) and keyFile (its private key) are the client's certificate for
// mutual TLS ("" for none; both or neither). TLS 1.2 or later. Set
// ServerName on the result when the address's host is not a name the
// daemon's certificate carries.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("spillway: reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("spillway: the CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("spillway: TLSConfig needs both certFile and keyFile, or neither")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("spillway: loading the client certificate %s and key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
