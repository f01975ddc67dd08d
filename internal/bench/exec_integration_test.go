package bench

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestRunExecRunc(t *testing.T) {
	cfg := benchConfig(t)
	var progress bytes.Buffer
	cfg.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunExec(ctx, cfg)
	if err != nil {
		t.Fatalf("RunExec: %v\nprogress:\n%s", err, progress.String())
	}
	assertCleanedUp(t, cfg.TempDir, progress.String())
	if len(rep.Subjects) != 2 || rep.Subjects[0].Name != "airlock-runc" || rep.Subjects[1].Name != "runc exec" {
		t.Fatalf("subjects = %+v", rep.Subjects)
	}
	for _, s := range rep.Subjects {
		st := s.FirstOutput
		if st.N != 2 || st.Min <= 0 || st.Min > st.P50 || st.P50 > st.P95 || st.P95 > st.Max {
			t.Errorf("%s: implausible stats %+v", s.Name, st)
		}
	}
	a := rep.Subjects[0]
	if len(a.Phases) != len(execPhases) || a.Phases[0].Name != "command session" {
		t.Fatalf("phases = %+v", a.Phases)
	}
	if len(rep.Ratios) != 1 || rep.Ratios[0].Peer != "runc exec" {
		t.Errorf("ratios = %+v", rep.Ratios)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
}

func TestRunThroughputRunc(t *testing.T) {
	cfg := benchConfig(t)
	cfg.Runs = 1
	var progress bytes.Buffer
	cfg.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 3<<20 + 7 // not a multiple of any buffer
	rep, err := RunThroughput(ctx, cfg, n)
	if err != nil {
		t.Fatalf("RunThroughput: %v\nprogress:\n%s", err, progress.String())
	}
	assertCleanedUp(t, cfg.TempDir, progress.String())
	want := []string{
		"airlock-runc " + DirStdout, "airlock-runc " + DirStdin, "airlock-runc " + DirUpload, "airlock-runc " + DirDownload,
		"runc exec " + DirStdout, "runc exec " + DirStdin,
	}
	if len(rep.Rows) != len(want) {
		t.Fatalf("rows = %+v", rep.Rows)
	}
	for i, r := range rep.Rows {
		if r.Subject+" "+r.Direction != want[i] || !r.Verified || r.Time.N != 1 || r.MBps.P50 <= 0 {
			t.Errorf("row %d = %+v, want %s, verified", i, r, want[i])
		}
	}
	if rep.Bytes != n {
		t.Errorf("bytes = %d", rep.Bytes)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
}

func TestRunThroughputRejectsNoBytes(t *testing.T) {
	if _, err := RunThroughput(context.Background(), DefaultConfig(), 0); err == nil {
		t.Fatal("0 bytes accepted")
	}
}
