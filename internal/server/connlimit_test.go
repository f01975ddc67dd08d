package server

import (
	"net"
	"testing"
	"time"
)

// At the cap, a new connection is not accepted until an open one closes.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(inner, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	<-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted above the cap of 2")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	first.Close() // a second close gives nothing back twice
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not accepted after one closed")
	}
	// Two connections hold both slots again: had the second close given a
	// slot back too, a fourth would be accepted.
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-accepted:
		t.Fatal("a connection was accepted above the cap after a double close")
	case <-time.After(200 * time.Millisecond):
	}
}
