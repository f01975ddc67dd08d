package dataplane

import (
	"io"
	"sync/atomic"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/metrics"
)

// fileStreams names the stream kind of each file transfer direction.
var fileStreams = map[string]string{
	apiv1.DirectionDownload: metrics.StreamFileDownload,
	apiv1.DirectionUpload:   metrics.StreamFileUpload,
	apiv1.DirectionTarOut:   metrics.StreamFileTarOut,
	apiv1.DirectionTarIn:    metrics.StreamFileTarIn,
	apiv1.DirectionWatch:    metrics.StreamFileWatch,
}

// countedBody is a request body whose bytes are counted as a stream's
// input (Config.Metrics) when done is called.
type countedBody struct {
	io.Reader
	n    atomic.Int64 // the transport may read after the call returned
	d    *DataPlane
	kind string
}

// countIn counts what is read of body as kind's input.
func (d *DataPlane) countIn(kind string, body io.Reader) *countedBody {
	return &countedBody{Reader: body, d: d, kind: kind}
}

func (c *countedBody) Read(p []byte) (int, error) {
	n, err := c.Reader.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// done adds the bytes read so far to the metrics (once: it resets the count).
func (c *countedBody) done() {
	c.d.cfg.Metrics.StreamBytes(c.kind, metrics.DirectionIn, c.n.Swap(0))
}
