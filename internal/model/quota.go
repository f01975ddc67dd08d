package model

import (
	"errors"
	"fmt"
)

// MaxQuotaLimit bounds every quota limit (about 10^12: far above any real
// project, well inside a JSON number's exact range).
const MaxQuotaLimit = 1 << 40

// Limit is one quota limit: a maximum, or unlimited (the zero value).
type Limit struct {
	max int64
	set bool
}

// Unlimited is the limit that never refuses.
func Unlimited() Limit { return Limit{} }

// ParseLimit parses an optional limit: nil is unlimited, otherwise 0 to
// MaxQuotaLimit (0 admits nothing). name is the limit's wire name, for the
// error.
func ParseLimit(name string, v *int64) (Limit, error) {
	if v == nil {
		return Limit{}, nil
	}
	if *v < 0 || *v > MaxQuotaLimit {
		return Limit{}, fmt.Errorf("%w: quota %s must be between 0 and %d, or null for no limit", ErrInvalid, name, int64(MaxQuotaLimit))
	}
	return Limit{max: *v, set: true}, nil
}

// Max returns the limit and whether there is one.
func (l Limit) Max() (int64, bool) { return l.max, l.set }

// Ptr returns the limit as an optional number (nil: unlimited), the form
// the wire and the store use.
func (l Limit) Ptr() *int64 {
	if !l.set {
		return nil
	}
	v := l.max
	return &v
}

// Quota bounds what the live sandboxes of one project hold together. A
// sandbox is live, and counts, in every state but deleted: pending,
// creating, running, paused, suspending, suspended, waking, failed and
// deleting all may hold a writable layer, memory or CPU on a node, and a
// sandbox's share is freed when its delete completes.
type Quota struct {
	Sandboxes Limit // number of live sandboxes
	CPUs      Limit // sum of their vCPUs
	MemoryMiB Limit // sum of their memory limits
	DiskMiB   Limit // sum of their writable layers
}

// ParseQuota parses the four optional limits (nil: unlimited).
func ParseQuota(sandboxes, cpus, memoryMiB, diskMiB *int64) (Quota, error) {
	var (
		q    Quota
		errs [4]error
	)
	q.Sandboxes, errs[0] = ParseLimit("sandboxes", sandboxes)
	q.CPUs, errs[1] = ParseLimit("cpus", cpus)
	q.MemoryMiB, errs[2] = ParseLimit("memory_mib", memoryMiB)
	q.DiskMiB, errs[3] = ParseLimit("disk_mib", diskMiB)
	if err := errors.Join(errs[:]...); err != nil {
		return Quota{}, err
	}
	return q, nil
}

// Unlimited reports whether no limit is set.
func (q Quota) Unlimited() bool {
	return !q.Sandboxes.set && !q.CPUs.set && !q.MemoryMiB.set && !q.DiskMiB.set
}

// Usage is what the live sandboxes of a project hold together.
type Usage struct {
	Sandboxes int64
	CPUs      int64
	MemoryMiB int64
	DiskMiB   int64
}

// VolumeQuotaLimit is the QuotaExceededError.Limit of a volume that would
// take its project's volumes over the server's per-project total.
const VolumeQuotaLimit = "volume_mib"

// ErrQuotaExceeded is matched (errors.Is) by *QuotaExceededError.
var ErrQuotaExceeded = errors.New("project quota exceeded")

// QuotaExceededError says which limit a new sandbox would exceed.
type QuotaExceededError struct {
	Limit     string // wire name: sandboxes, cpus, memory_mib, disk_mib or VolumeQuotaLimit
	Max       int64  // the limit
	Used      int64  // held by the project's live sandboxes
	Requested int64  // what the new sandbox asks for
}

func (e *QuotaExceededError) Error() string {
	if e.Limit == VolumeQuotaLimit {
		return fmt.Sprintf("%s: %s: the project's volumes hold %d MiB of %d, and this volume asks for %d more; delete a volume or ask an admin to raise the limit",
			ErrQuotaExceeded, e.Limit, e.Used, e.Max, e.Requested)
	}
	if e.Limit == "sandboxes" {
		return fmt.Sprintf("%s: the project has %d live sandboxes of the %d its quota allows; delete one or ask an admin to raise the quota",
			ErrQuotaExceeded, e.Used, e.Max)
	}
	return fmt.Sprintf("%s: %s: the project's live sandboxes hold %d of %d, and this sandbox asks for %d more",
		ErrQuotaExceeded, e.Limit, e.Used, e.Max, e.Requested)
}

// Is makes errors.Is(err, ErrQuotaExceeded) true.
func (e *QuotaExceededError) Is(target error) bool { return target == ErrQuotaExceeded }

// Admit checks that one more sandbox of resources r fits a project whose
// live sandboxes hold u. It returns nil or a *QuotaExceededError naming the
// first limit exceeded (sandboxes, cpus, memory_mib, disk_mib).
func (q Quota) Admit(u Usage, r Resources) error {
	checks := []struct {
		name      string
		limit     Limit
		used, req int64
	}{
		{"sandboxes", q.Sandboxes, u.Sandboxes, 1},
		{"cpus", q.CPUs, u.CPUs, int64(r.CPUs)},
		{"memory_mib", q.MemoryMiB, u.MemoryMiB, int64(r.MemoryMiB)},
		{"disk_mib", q.DiskMiB, u.DiskMiB, int64(r.DiskMiB)},
	}
	for _, c := range checks {
		if m, ok := c.limit.Max(); ok && c.used+c.req > m {
			return &QuotaExceededError{Limit: c.name, Max: m, Used: c.used, Requested: c.req}
		}
	}
	return nil
}
