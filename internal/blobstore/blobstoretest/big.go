package blobstoretest

import (
	"crypto/sha256"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/blobstore"
)

// heapWatch samples the heap until stopped and reports its peak growth over
// the heap at the start.
type heapWatch struct {
	stop chan struct{}
	wg   sync.WaitGroup
	base uint64
	peak uint64
}

func watchHeap() *heapWatch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w := &heapWatch{stop: make(chan struct{}), base: ms.HeapAlloc, peak: ms.HeapAlloc}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			w.peak = max(w.peak, ms.HeapAlloc)
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// Stop ends the sampling and returns the peak growth in bytes.
func (w *heapWatch) Stop() int64 {
	close(w.stop)
	w.wg.Wait()
	return int64(w.peak - w.base)
}

func testBig(t *testing.T, h Harness) {
	s := h.New(t)
	size := h.BigSize
	d, src := stream(size, 12)

	w := watchHeap()
	start := time.Now()
	if err := s.Put(ctx(t), d, src(), size); err != nil {
		w.Stop()
		t.Fatalf("Put of %d bytes: %v", size, err)
	}
	putTime := time.Since(start)
	start = time.Now()
	rc, gotSize, err := s.Open(ctx(t), d)
	if err != nil {
		w.Stop()
		t.Fatal(err)
	}
	hash := sha256.New()
	n, err := io.CopyBuffer(hash, rc, make([]byte, 256<<10))
	rc.Close()
	getTime := time.Since(start)
	growth := w.Stop()
	if err != nil || n != size || gotSize != size {
		t.Fatalf("read back: %d of %d bytes (Open said %d): %v", n, size, gotSize, err)
	}
	var sum [sha256.Size]byte
	hash.Sum(sum[:0])
	if blobstore.FromSHA256(sum) != d {
		t.Fatal("read back other bytes")
	}
	t.Logf("%d MiB: put %v, open+read %v, round trip %v; peak heap growth %.1f MiB",
		size>>20, putTime.Round(time.Millisecond), getTime.Round(time.Millisecond),
		(putTime + getTime).Round(time.Millisecond), float64(growth)/(1<<20))
	if growth > h.MaxHeapGrowth {
		t.Errorf("heap grew by %d bytes while streaming a %d-byte blob (bound %d): the store holds the blob in memory", growth, size, h.MaxHeapGrowth)
	}
}
