// Command egressattack is the attack client of the egress replay suite
// (integration/egress_replay_test.go): a static binary copied into a
// sandbox for what busybox cannot do (an SNI that differs from the Host,
// DNS over TCP to a chosen server, raw dials with a banner read). It prints
// "OK <what it got>" and exits 0 when the attack got through, or
// "ERR <why>" and exits 1 when it was stopped.
package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const timeout = 5 * time.Second

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: egressattack tls|dial|dns ARGS"))
	}
	var out string
	var err error
	switch args := os.Args[2:]; os.Args[1] {
	case "tls": // tls ADDR:PORT SNI HOST [NAME:VALUE...]: extra request headers
		if len(args) < 3 {
			fail(fmt.Errorf("usage: egressattack tls ADDR:PORT SNI HOST [NAME:VALUE...]"))
		}
		out, err = tlsGet(args[0], args[1], args[2], args[3:]...)
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
// is about policy, not trust) and sends a GET with host and the extra headers.
func tlsGet(addr, sni, host string, headers ...string) (string, error) {
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
	extra := ""
	for _, h := range headers {
		extra += h + "\r\n"
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", host, extra)
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

// lookup sends one A query for name straight to server (no hosts file, no
// system resolver) and prints the addresses answered.
func lookup(server, name, proto string) (string, error) {
	q, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return "", err
	}
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 0x5a5a, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: q, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}
	packed, err := msg.Pack()
	if err != nil {
		return "", err
	}
	c, err := net.DialTimeout(proto, server, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	buf := make([]byte, 65536)
	var n int
	if proto == "tcp" {
		if _, err := c.Write(append([]byte{byte(len(packed) >> 8), byte(len(packed))}, packed...)); err != nil {
			return "", err
		}
		if _, err := io.ReadFull(c, buf[:2]); err != nil {
			return "", fmt.Errorf("read answer length: %w", err)
		}
		n = int(buf[0])<<8 | int(buf[1])
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return "", fmt.Errorf("read answer: %w", err)
		}
	} else {
		if _, err := c.Write(packed); err != nil {
			return "", err
		}
		if n, err = c.Read(buf); err != nil {
			return "", fmt.Errorf("read answer: %w", err)
		}
	}
	var ans dnsmessage.Message
	if err := ans.Unpack(buf[:n]); err != nil {
		return "", fmt.Errorf("unpack answer: %w", err)
	}
	if ans.RCode != dnsmessage.RCodeSuccess {
		return "", fmt.Errorf("answer: %s", ans.RCode)
	}
	var addrs []string
	for _, rr := range ans.Answers {
		if a, ok := rr.Body.(*dnsmessage.AResource); ok {
			addrs = append(addrs, net.IP(a.A[:]).String())
		}
	}
	if len(addrs) == 0 {
		return "", errors.New("answer: no address")
	}
	return strings.Join(addrs, ","), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
