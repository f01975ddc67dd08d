package model

import (
	"errors"
	"strings"
	"testing"
)

func i64(v int64) *int64 { return &v }

func TestParseQuota(t *testing.T) {
	q, err := ParseQuota(nil, nil, nil, nil)
	if err != nil || !q.Unlimited() {
		t.Fatalf("all nil: %+v, %v", q, err)
	}
	q, err = ParseQuota(i64(0), i64(8), nil, i64(MaxQuotaLimit))
	if err != nil || q.Unlimited() {
		t.Fatalf("%+v, %v", q, err)
	}
	if m, ok := q.Sandboxes.Max(); !ok || m != 0 {
		t.Errorf("sandboxes %d %v", m, ok)
	}
	if q.MemoryMiB.Ptr() != nil || *q.CPUs.Ptr() != 8 || *q.DiskMiB.Ptr() != MaxQuotaLimit {
		t.Errorf("round trip: %v %v %v", q.MemoryMiB.Ptr(), q.CPUs.Ptr(), q.DiskMiB.Ptr())
	}
	for _, bad := range [][4]*int64{
		{i64(-1), nil, nil, nil}, {nil, i64(MaxQuotaLimit + 1), nil, nil}, {nil, nil, i64(-5), nil}, {nil, nil, nil, i64(-1)},
	} {
		if _, err := ParseQuota(bad[0], bad[1], bad[2], bad[3]); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v accepted: %v", bad, err)
		}
	}
	_, err = ParseQuota(nil, nil, i64(-5), nil)
	if err == nil || !strings.Contains(err.Error(), "memory_mib") {
		t.Errorf("the error does not name the limit: %v", err)
	}
}

func TestQuotaAdmit(t *testing.T) {
	r := Resources{CPUs: 2, MemoryMiB: 1024, DiskMiB: 4096}
	if err := (Quota{}).Admit(Usage{Sandboxes: 1 << 30, CPUs: 1 << 40}, r); err != nil {
		t.Fatalf("unlimited refused: %v", err)
	}
	q, _ := ParseQuota(i64(3), i64(6), i64(3072), i64(12288))
	if err := q.Admit(Usage{Sandboxes: 2, CPUs: 4, MemoryMiB: 2048, DiskMiB: 8192}, r); err != nil {
		t.Fatalf("exactly at every limit: %v", err)
	}
	for _, c := range []struct {
		u    Usage
		want string
	}{
		{Usage{Sandboxes: 3}, "sandboxes"},
		{Usage{CPUs: 5}, "cpus"},
		{Usage{MemoryMiB: 2049}, "memory_mib"},
		{Usage{DiskMiB: 8193}, "disk_mib"},
	} {
		err := q.Admit(c.u, r)
		var qe *QuotaExceededError
		if !errors.As(err, &qe) || !errors.Is(err, ErrQuotaExceeded) || qe.Limit != c.want {
			t.Fatalf("%+v: %v, want %s exceeded", c.u, err, c.want)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("message does not name the limit: %v", err)
		}
	}
	zero, _ := ParseQuota(i64(0), nil, nil, nil)
	err := zero.Admit(Usage{}, r)
	if err == nil || !strings.Contains(err.Error(), "0 live sandboxes of the 0") {
		t.Fatalf("a zero quota: %v", err)
	}
	cpu, _ := ParseQuota(nil, i64(8), nil, nil)
	err = cpu.Admit(Usage{CPUs: 7}, r)
	if err == nil || !strings.Contains(err.Error(), "cpus: the project's live sandboxes hold 7 of 8, and this sandbox asks for 2 more") {
		t.Fatalf("message: %v", err)
	}
}
