package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockdev/airlock/internal/retry"
)

// listenBackoff is the listener's reconnection backoff: from 50 ms,
// doubling, at most 5 s (±20%), started again after a reconnect.
func listenBackoff() retry.Policy {
	return retry.Policy{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}
}

// listener holds one dedicated connection that LISTENs on Channel and calls
// notify with the payload of every notification. When the connection drops
// it reconnects with exponential backoff and calls wake (every watcher),
// since notifications sent while it was away are lost.
type listener struct {
	cfg    *pgx.ConnConfig
	logger *slog.Logger
	notify func(payload string)
	wake   func()
	// dial replaces connect in tests; clock is the backoff's (nil: the
	// system clock).
	dial  func(ctx context.Context) (*pgx.Conn, error)
	clock retry.Clock
}

func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	if l.dial != nil {
		return l.dial(ctx)
	}
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("LISTEN %s: %w", Channel, err)
	}
	return conn, nil
}

// run owns conn and every later connection; it returns when ctx ends.
func (l *listener) run(ctx context.Context, conn *pgx.Conn) {
	for conn != nil {
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				if ctx.Err() == nil {
					l.logger.Warn("store listener connection lost; reconnecting", "err", err)
				}
				break
			}
			l.notify(n.Payload)
		}
		conn.Close(context.Background())
		conn = l.reconnect(ctx)
	}
}

// reconnect connects again, waiting the listener's backoff (started afresh
// for each outage) between failures, and calls wake once connected. It
// returns nil once ctx ends.
func (l *listener) reconnect(ctx context.Context) *pgx.Conn {
	var conn *pgx.Conn
	err := retry.Do(ctx, listenBackoff(), l.clock, func() error {
		c, err := l.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return retry.Permanent(err)
			}
			return err
		}
		conn = c
		return nil
	}, func(err error, d time.Duration) {
		l.logger.Warn("store listener cannot reconnect", "err", err, "retry_in", d)
	})
	if err != nil { // the backoff never gives up: ctx ended
		return nil
	}
	l.logger.Info("store listener reconnected")
	l.wake()
	return conn
}
