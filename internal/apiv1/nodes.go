package apiv1

import "time"

// Node is one `airlock server` process as GET /v1/admin/nodes shows it:
// what it is, what it offers, what its live sandboxes hold and when it last
// said it was alive (by the database's clock).
type Node struct {
	ID           string            `json:"id"`
	Incarnation  string            `json:"incarnation"` // one run of the process; new on every start
	Role         string            `json:"role"`        // all, api or node
	AdvertiseURL string            `json:"advertise_url"`
	State        string            `json:"state"`                  // active, cordoned, draining or dead
	StateReason  string            `json:"state_reason,omitempty"` // why it is dead
	Labels       map[string]string `json:"labels"`
	Capacity     NodeCapacity      `json:"capacity"`
	Usage        NodeUsage         `json:"usage"`
	CanPull      bool              `json:"can_pull"` // reaches the shared blob store
	StartedAt    time.Time         `json:"started_at"`
	HeartbeatAt  time.Time         `json:"heartbeat_at"`
	// HeartbeatAgeMS is how long ago the last heartbeat was, in
	// milliseconds, by the database's clock when the node was read.
	HeartbeatAgeMS int64 `json:"heartbeat_age_ms"`
	// Drained: the node is draining and no live sandbox is left on it.
	Drained bool `json:"drained"`
}

// NodeCapacity is what a node offers for placement; 0 bounds nothing.
type NodeCapacity struct {
	Slots     int `json:"slots"` // sandboxes at most
	CPUs      int `json:"cpus"`
	MemoryMiB int `json:"memory_mib"`
	// Pids is the node's pids budget: the host tasks its sandboxes' host
	// cgroups may hold in all (--pids-budget, or derived from the host's
	// pid_max and threads-max).
	Pids int `json:"pids"`
}

// NodeUsage is what a node's live sandboxes (every state but deleted and
// failed) hold.
type NodeUsage struct {
	Sandboxes int `json:"sandboxes"`
	CPUs      int `json:"cpus"`
	MemoryMiB int `json:"memory_mib"`
	Pids      int `json:"pids"` // the sum of their host pids limits
}

// NodeList is the response of GET /v1/admin/nodes, in ID order.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}
