package agent

import (
	"encoding/binary"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// maxDropIndex bounds the memory of a dropIndex. At 32 KiB per event of a
// fast writer, 64 KiB of index describes about 20 GiB of dropped output.
const maxDropIndex = 64 << 10

// dropIndex remembers the size and stream of every event an eventLog
// dropped (a contiguous run of Seq ending just before the first kept event),
// so that a reader resuming from any of them learns exactly what it missed.
// Each entry is one uvarint: len<<1 | 1 for stderr. When the index outgrows
// maxDropIndex its oldest half is forgotten, and gaps reaching back before
// it are reported as inexact (a lower bound).
type dropIndex struct {
	first  uint64 // Seq of the first indexed entry; 0 if nothing was dropped
	next   uint64 // Seq after the last indexed entry
	buf    []byte
	forgot bool // entries before first are no longer indexed
}

func (d *dropIndex) add(ev *agentproto.Event) {
	if d.first == 0 {
		d.first, d.next = ev.Seq, ev.Seq
	}
	v := uint64(len(ev.Data)) << 1
	if ev.Type == agentproto.EventStderr {
		v |= 1
	}
	d.buf = binary.AppendUvarint(d.buf, v)
	d.next = ev.Seq + 1
	if len(d.buf) > maxDropIndex {
		d.forgetHalf()
	}
}

func (d *dropIndex) forgetHalf() {
	off, n := 0, 0
	for off < len(d.buf)/2 {
		_, k := binary.Uvarint(d.buf[off:])
		off += k
		n++
	}
	d.buf = append(d.buf[:0], d.buf[off:]...)
	d.first += uint64(n)
	d.forgot = true
}

// gap describes the events in (after, firstKept): what a reader that has
// seen everything up to after misses before the first kept event.
func (d *dropIndex) gap(after, firstKept uint64) agentproto.Gap {
	// Entries before first are missing only if they were forgotten.
	g := agentproto.Gap{Events: firstKept - 1 - after, Exact: !d.forgot || after+1 >= d.first}
	seq := d.first
	for off := 0; off < len(d.buf); seq++ {
		v, k := binary.Uvarint(d.buf[off:])
		off += k
		if seq <= after {
			continue
		}
		if v&1 == 1 {
			g.StderrBytes += v >> 1
		} else {
			g.StdoutBytes += v >> 1
		}
	}
	return g
}
