package agentclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/net/http2"
)

// Serial transports (a virtio-serial port behind QEMU's chardev socket)
// carry one connection after another over a single channel, and the guest
// is not told at once when a host connection ends. What the guest wrote
// for an earlier host connection and that connection never read (its last
// responses, a GOAWAY, frames of a handshake the host gave up on) is
// delivered to the next host connection first: an HTTP/2 client would read
// it as its own frames, fail the connection, or worse take a stale response
// to an earlier connection's stream 1 for its own and fail the next request
// (the agent's side is described in agent/listen_serial.go).
//
// SyncSerial makes a fresh serial connection start clean. It opens a
// throwaway HTTP/2 connection on the stream (client preface, empty
// SETTINGS, PING with a random payload) and discards everything the guest
// sends up to and including the PING's acknowledgement: whatever precedes
// it is stale or belongs to the throwaway connection. The HTTP/2 client's
// own preface, written next, then starts a new connection in the guest
// (a preface at a frame boundary ends the current one there), whose
// frames are the first the client reads. Every agent that serves a serial
// port does this hand-over; the PING is plain HTTP/2, so the agent needs
// nothing new.

// maxSyncDiscard bounds the stale bytes SyncSerial reads past: more than
// the largest amount a guest connection can have in flight (both HTTP/2
// flow-control windows of a connection) means something else is wrong.
const maxSyncDiscard = 64 << 20

// SyncSerial prepares conn, a fresh connection over a serial transport,
// for an HTTP/2 client (see above). It waits for the guest until ctx ends;
// on error the caller closes conn.
func SyncSerial(ctx context.Context, conn net.Conn) (err error) {
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("serial sync: %w", err)
	}
	var out, want bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	if err := errors.Join(fr.WriteSettings(), fr.WritePing(false, nonce)); err != nil {
		return fmt.Errorf("serial sync: %w", err)
	}
	// The acknowledgement is looked for as bytes, not parsed as frames:
	// what precedes it may end in the middle of a frame.
	if err := http2.NewFramer(&want, nil).WritePing(true, nonce); err != nil {
		return fmt.Errorf("serial sync: %w", err)
	}

	// ctx bounds the reads and writes below. Once ctx has ended, conn's
	// deadline may have passed, so conn is of no use even if it synced.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer func() {
		if !stop() && err == nil {
			err = syncError(ctx, context.Cause(ctx))
		}
	}()
	if _, err := conn.Write(out.Bytes()); err != nil {
		return syncError(ctx, fmt.Errorf("write: %w", err))
	}
	buf := make([]byte, 32<<10)
	var window []byte // the last len(want)-1 bytes read, then the new ones
	discarded := 0
	for {
		n, err := conn.Read(buf)
		window = append(window, buf[:n]...)
		if bytes.Contains(window, want.Bytes()) {
			// Anything after the acknowledgement is the throwaway
			// connection's too.
			return nil
		}
		discarded += n
		if discarded > maxSyncDiscard {
			return fmt.Errorf("serial sync: no answer in the first %d bytes from the guest", discarded)
		}
		if err != nil {
			return syncError(ctx, fmt.Errorf("read: %w", err))
		}
		window = append(window[:0], window[max(0, len(window)-want.Len()+1):]...)
	}
}

func syncError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("serial sync: the guest did not answer: %w (%w)", context.Cause(ctx), err)
	}
	return fmt.Errorf("serial sync: %w", err)
}
