package agent

import (
	"errors"
	"net"
	"sync"
)

// multiListener accepts on several listeners at once (the agent's
// virtio-serial ports). One goroutine per listener, owned by the
// multiListener, feeds accepted connections to Accept until Close.
type multiListener struct {
	lns   []net.Listener
	conns chan net.Conn
	errs  chan error
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func newMultiListener(lns []net.Listener) *multiListener {
	m := &multiListener{lns: lns, conns: make(chan net.Conn), errs: make(chan error, len(lns)), done: make(chan struct{})}
	for _, ln := range lns {
		m.wg.Add(1)
		go m.serve(ln)
	}
	return m
}

func (m *multiListener) serve(ln net.Listener) {
	defer m.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case m.errs <- err:
			case <-m.done:
			}
			return
		}
		select {
		case m.conns <- c:
		case <-m.done:
			c.Close()
			return
		}
	}
}

// Accept returns the next connection of any listener; the first
// listener's error (e.g. after Close) ends it.
func (m *multiListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case err := <-m.errs:
		return nil, err
	case <-m.done:
		return nil, net.ErrClosed
	}
}

// Close closes every listener and waits for their goroutines.
func (m *multiListener) Close() error {
	var err error
	m.once.Do(func() {
		close(m.done)
		for _, ln := range m.lns {
			err = errors.Join(err, ln.Close())
		}
		m.wg.Wait()
	})
	return err
}

// Addr is the first listener's address.
func (m *multiListener) Addr() net.Addr { return m.lns[0].Addr() }
