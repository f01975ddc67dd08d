// Command egressattack is the attack client of the egress replay suite
// (integration/egress_replay_test.go): a static binary copied into a
// sandbox for what busybox cannot do (an SNI that differs from the Host,
// DNS over TCP to a chosen server, raw dials with a banner read). It prints
// "OK <what it got>" and exits 0 when the attack got through, or
// "ERR <why>" and exits 1 when it was stopped.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

const timeout = 5 * time.Second

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: egressattack tls|dial|dns ARGS"))
	}
	var out string
	var err error
	switch args := os.Args[2:]; os.Args[1] {
	case "tls": // tls ADDR:PORT SNI HOST
		if len(args) != 3 {
			fail(fmt.Errorf("usage: egressattack tls ADDR:PORT SNI HOST"))
		}
		out, err = tlsGet(args[0], args[1], args[2])
	case "dial": // dial ADDR:PORT: connect and read one line
		if len(args) != 1 {
			fail(fmt.Errorf("usage: egressattack dial ADDR:PORT"))
		}
		out, err = dial(args[0])
	case "dns": // dns SERVER:PORT NAME udp|tcp
		if len(args) != 3 {
			fail(fmt.Errorf("usage: egressattack dns SERVER:PORT NAME udp|tcp"))
		}
		out, err = lookup(args[0], args[1], args[2])
	default:
		err = fmt.Errorf("unknown attack %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	fmt.Println("OK " + out)
}

func fail(err error) {
	fmt.Println("ERR " + err.Error())
	os.Exit(1)
}

// tlsGet connects to addr (a name is resolved through the system's
// resolver), handshakes with sni (certificates are not checked: the attack
// is about policy, not trust) and sends a GET with host.
func tlsGet(addr, sni, host string) (string, error) {
	d := net.Dialer{Timeout: timeout}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(timeout))
	c := tls.Client(raw, &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err := c.Handshake(); err != nil {
		return "", fmt.Errorf("handshake: %w", err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	b, err := io.ReadAll(c)
	if len(b) == 0 && err != nil {
		return "", err
	}
	resp := string(b)
	if !strings.HasPrefix(resp, "HTTP/1.1 200") {
		return "", fmt.Errorf("refused: %q", firstLine(resp))
	}
	return strings.ReplaceAll(resp, "\r\n", " | "), nil
}

func dial(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if line == "" && err != nil {
		return "", fmt.Errorf("connected, nothing read: %w", err)
	}
	return strings.TrimSpace(line), nil
}

func lookup(server, name, proto string) (string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, proto, server)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	addrs, err := r.LookupHost(ctx, name)
	if err != nil {
		return "", err
	}
	return strings.Join(addrs, ","), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
