package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reconnection backoff of the listener.
const (
	listenBackoffMin = 50 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// listener holds one dedicated connection that LISTENs on Channel and calls
// wake for every notification. When the connection drops it reconnects with
// exponential backoff and calls wake once more, since notifications sent
// while it was away are lost.
type listener struct {
	cfg    *pgx.ConnConfig
	logger *slog.Logger
	wake   func()
}

func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
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
	backoff := listenBackoffMin
	for {
		for {
			if _, err := conn.WaitForNotification(ctx); err != nil {
				if ctx.Err() == nil {
					l.logger.Warn("store listener connection lost; reconnecting", "err", err)
				}
				break
			}
			l.wake()
		}
		conn.Close(context.Background())
		conn = nil
		for conn == nil {
			if ctx.Err() != nil {
				return
			}
			c, err := l.connect(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				l.logger.Warn("store listener cannot reconnect", "err", err, "retry_in", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, listenBackoffMax)
				continue
			}
			conn, backoff = c, listenBackoffMin
			l.logger.Info("store listener reconnected")
			l.wake()
		}
	}
}
