// LISTEN on the outbox channel: new, retried and unblocked messages wake the
// dispatcher at once.

package webhooks

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// listen wakes the dispatcher on every NOTIFY of the outbox channel
// (messages enqueued, retried, or unblocked by another dispatcher).
func (d *Dispatcher) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := func() error {
			conn, err := d.Pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
				return err
			}
			defer func() {
				uctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if _, err := conn.Exec(uctx, "UNLISTEN "+notifyChannel); err != nil {
					_ = conn.Conn().Close(uctx)
				}
			}()
			// Catch up with anything enqueued before LISTEN took effect.
			d.signal()
			for {
				if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
					return err
				}
				d.signal()
			}
		}()
		if ctx.Err() == nil {
			d.Log.Warn("webhooks: listen connection lost, retrying", zap.Error(err))
			sleepCtx(ctx, time.Second)
		}
	}
}
