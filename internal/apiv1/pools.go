package apiv1

import "time"

// Sources of a sandbox: how its create got it running.
const (
	SourceCold     = "cold"     // created and started for this create
	SourcePool     = "pool"     // claimed from a warm pool
	SourceSnapshot = "snapshot" // restored from a base snapshot (VM environments)
)

// PutPoolRequest is the body of PUT /v1/pools: it creates the pool of that
// key (template, environment, cpus, memory_mib) or sets its size. Omitted
// fields take the defaults of a create (environment: the server's default,
// 1 CPU, 512 MiB).
type PutPoolRequest struct {
	Template    string `json:"template"` // a template name (its tag follows moves) or sha256:… digest
	Size        int    `json:"size"`     // ready sandboxes to keep on each node (0: drain)
	Environment string `json:"environment,omitempty"`
	CPUs        int    `json:"cpus,omitempty"`
	MemoryMiB   int    `json:"memory_mib,omitempty"`
}

// PoolRelease is one template digest a pool keeps warm: the newest two
// releases of a tag are kept.
type PoolRelease struct {
	Digest   string `json:"digest"`
	Ready    int    `json:"ready"`    // running, agent answered, unclaimed
	Starting int    `json:"starting"` // being created
}

// Pool is a warm pool: sandboxes created ahead of time, claimed by a create
// whose template, environment and resources match.
type Pool struct {
	ID          string `json:"id"`
	Template    string `json:"template"`    // as set: a name or a digest
	Environment string `json:"environment"` // name of the execution environment
	CPUs        int    `json:"cpus"`
	MemoryMiB   int    `json:"memory_mib"`
	Size        int    `json:"size"` // target of ready sandboxes per node
	// Ready and Starting sum the releases.
	Ready    int           `json:"ready"`
	Starting int           `json:"starting"`
	Releases []PoolRelease `json:"releases"`
	// Draining counts unclaimed sandboxes being deleted (the pool
	// shrank or drained, a release left it, or they failed).
	Draining int `json:"draining"`
	// Hits counts creates served from the pool, Misses creates that
	// matched it but found it empty and started cold.
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// Drained is true while the pool is unused for longer than the
	// server's drain period: it keeps no sandboxes until a create
	// matches it again.
	Drained    bool       `json:"drained"`
	LastUsedAt *time.Time `json:"last_used_at"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// PoolList is the response of GET /v1/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
}
