// Package metrics is Airlock's Prometheus instrumentation: one Metrics per
// server process, on its own registry (never the default one), handed by
// the composition root to the components that observe something. Every
// method is safe on a nil *Metrics and then does nothing, so tests and
// components built without metrics work unchanged.
//
// Label values come from small fixed sets (operation kinds, outcomes,
// sources, verdicts, stream kinds, store and runtime call names) or from
// operator-defined names (execution environments, pools); never from
// sandbox, process or request IDs. Values outside a fixed set are counted
// as "other".
package metrics

import (
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlockdev/airlock/internal/egress/decisionlog"
)

// Namespace prefixes every metric of Airlock's own.
const Namespace = "airlock"

// Outcomes of an operation.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
)

// Verdicts of an egress decision.
const (
	VerdictAllowed = "allowed"
	VerdictDenied  = "denied"
)

// Directions of data-plane bytes: in is from the client to the sandbox
// (stdin, uploads), out from the sandbox to the client (output, downloads).
const (
	DirectionIn  = "in"
	DirectionOut = "out"
)

// Kinds of data-plane stream.
const (
	StreamAttachSSE       = "attach_sse"
	StreamAttachWebSocket = "attach_websocket"
	StreamStdin           = "stdin"
	StreamFileDownload    = "file_download"
	StreamFileUpload      = "file_upload"
	StreamFileTarOut      = "file_tar_out"
	StreamFileTarIn       = "file_tar_in"
	StreamFileWatch       = "file_watch"
)

// other replaces a label value outside its fixed set.
const other = "other"

var (
	streamKinds    = []string{StreamAttachSSE, StreamAttachWebSocket, StreamStdin, StreamFileDownload, StreamFileUpload, StreamFileTarOut, StreamFileTarIn, StreamFileWatch}
	sources        = []string{"cold", "pool", "snapshot"}
	operationKinds = []string{"create", "delete", "pause", "resume", "suspend", "wake", OpPoolFill}
	egressKinds    = []string{"dns", "connect", "http", "tls", "cut"}
	// StoreOps are the store calls whose errors are counted.
	storeOps = []string{"begin", "commit", "exec", "query", "query_row"}
	// RuntimeOps are the runtime calls whose errors are counted.
	runtimeOps = []string{"create", "start", "state", "delete", "list", "pause", "resume", "suspend", "restore", "forget_snapshot"}
)

// oneOf returns v when it is in set, else "other".
func oneOf(v string, set []string) string {
	if slices.Contains(set, v) {
		return v
	}
	return other
}

// CreateBuckets are the create latency histogram's buckets, in seconds:
// from a pool claim (milliseconds) to a cold start of a virtual machine
// under emulation (tens of seconds).
var createBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// Metrics holds the registry and the metrics Airlock's components move.
type Metrics struct {
	reg           *prometheus.Registry
	createSeconds *prometheus.HistogramVec
	operations    *prometheus.CounterVec
	streamsOpen   *prometheus.GaugeVec
	streamBytes   *prometheus.CounterVec
	egress        *prometheus.CounterVec
	storeErrors   *prometheus.CounterVec
	runtimeErrors *prometheus.CounterVec
	auditFailures prometheus.Counter
	handler       http.Handler
}

// New returns a Metrics on a registry of its own, with the Go runtime's and
// the process's collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		createSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "sandbox_create_seconds",
			Help:    "Time from a create request to its sandbox running, by execution environment and source (cold: created and started; snapshot: restored from a base snapshot; pool: claimed from a warm pool).",
			Buckets: createBuckets,
		}, []string{"environment", "source"}),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "operations_finished_total",
			Help: "Lifecycle operations this process finished, by kind and outcome (succeeded or failed; a cancelled operation failed).",
		}, []string{"kind", "outcome"}),
		streamsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "dataplane_streams_open",
			Help: "Data-plane streams open on this process, by kind (attach over SSE or WebSocket, stdin, file transfers and watches).",
		}, []string{"kind"}),
		streamBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "dataplane_bytes_total",
			Help: "Payload bytes the data plane carried, by stream kind and direction (in: client to sandbox; out: sandbox to client).",
		}, []string{"kind", "direction"}),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "egress_decisions_total",
			Help: "Egress decisions for the sandboxes of this node, by kind (dns, connect, http, tls, cut) and verdict (allowed or denied).",
		}, []string{"kind", "verdict"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "store_errors_total",
			Help: "Failed database calls of the store, by call (begin, commit, exec, query, query_row); absent rows, constraint violations and cancelled requests are answers, not errors.",
		}, []string{"op"}),
		runtimeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "runtime_errors_total",
			Help: "Failed runtime calls of the workers, by runtime and call; a sandbox the runtime does not have and a capability it lacks are not counted.",
		}, []string{"runtime", "op"}),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "audit_write_failures_total",
			Help: "Mutating requests whose audit log entry could not be written (the request itself was answered; see the error log).",
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: Namespace}),
		m.createSeconds, m.operations, m.streamsOpen, m.streamBytes, m.egress, m.storeErrors, m.runtimeErrors, m.auditFailures,
	)
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg, // promhttp_metric_handler_errors_total
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
	for _, k := range streamKinds { // every kind shows, at 0
		m.streamsOpen.WithLabelValues(k)
		m.streamBytes.WithLabelValues(k, DirectionIn)
		m.streamBytes.WithLabelValues(k, DirectionOut)
	}
	for _, v := range []string{VerdictAllowed, VerdictDenied} {
		for _, k := range egressKinds {
			m.egress.WithLabelValues(k, v)
		}
	}
	return m
}

// Registry is the registry the metrics are on (to register more
// collectors, see WatchStore, and for tests).
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// Handler serves the registry in the Prometheus text (or OpenMetrics)
// format. A collector that fails leaves its metrics out and the rest is
// served. Nil Metrics: 404.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return m.handler
}

// CreateFinished observes a create: from its request (or operation's
// creation) to the sandbox running. environment is the execution
// environment's name, source cold, snapshot or pool.
func (m *Metrics) CreateFinished(environment, source string, took time.Duration) {
	if m == nil {
		return
	}
	if environment == "" {
		environment = "none" // not known (a sandbox recorded without its runtime)
	}
	m.createSeconds.WithLabelValues(environment, oneOf(source, sources)).Observe(max(took, 0).Seconds())
}

// OperationFinished counts an operation that ended, succeeded or not.
func (m *Metrics) OperationFinished(kind string, succeeded bool) {
	if m == nil {
		return
	}
	outcome := OutcomeFailed
	if succeeded {
		outcome = OutcomeSucceeded
	}
	m.operations.WithLabelValues(oneOf(kind, operationKinds), outcome).Inc()
}

// StreamOpened counts a data-plane stream of kind as open until the
// returned function is called (once).
func (m *Metrics) StreamOpened(kind string) (closed func()) {
	if m == nil {
		return func() {}
	}
	g := m.streamsOpen.WithLabelValues(oneOf(kind, streamKinds))
	g.Inc()
	return g.Dec
}

// StreamBytes counts n payload bytes of a stream of kind in direction.
func (m *Metrics) StreamBytes(kind, direction string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	if direction != DirectionIn {
		direction = DirectionOut
	}
	m.streamBytes.WithLabelValues(oneOf(kind, streamKinds), direction).Add(float64(n))
}

// EgressDecision counts one egress decision of kind (the decision log's
// kinds: dns, connect, http, tls, cut).
func (m *Metrics) EgressDecision(kind string, allowed bool) {
	if m == nil {
		return
	}
	verdict := VerdictDenied
	if allowed {
		verdict = VerdictAllowed
	}
	m.egress.WithLabelValues(oneOf(kind, egressKinds), verdict).Inc()
}

// StoreError counts a failed database call of the store.
func (m *Metrics) StoreError(op string) {
	if m == nil {
		return
	}
	m.storeErrors.WithLabelValues(oneOf(op, storeOps)).Inc()
}

// RuntimeError counts a failed call op of runtime (its name: runc, runsc, …).
func (m *Metrics) RuntimeError(runtime, op string) {
	if m == nil {
		return
	}
	m.runtimeErrors.WithLabelValues(runtime, oneOf(op, runtimeOps)).Inc()
}

// AuditWriteFailed counts a mutating request whose audit entry was not written.
func (m *Metrics) AuditWriteFailed() {
	if m == nil {
		return
	}
	m.auditFailures.Inc()
}

// OpPoolFill is the operations counter's kind of a create the pool
// controller made to fill a warm pool (no user waited for it; its claim
// is counted as a create with source pool).
const OpPoolFill = "pool_fill"

// EgressObserver is the egress registry's OnDecision: it counts every
// decision logged.
func (m *Metrics) EgressObserver() func(decisionlog.Event) {
	return func(e decisionlog.Event) { m.EgressDecision(e.Kind, e.Allowed) }
}
