package build

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/airlockdev/airlock/internal/model"
)

// MaxLogBytes bounds one build's log file. Beyond it, writes are counted
// rather than kept, and the log ends with a line that says how many bytes
// were dropped: nothing is lost silently.
const MaxLogBytes = 16 << 20

// LogPath is the log file of build id under dir.
func LogPath(dir string, id model.BuildID) string {
	return filepath.Join(dir, id.String()+".log")
}

// logFile is a build's log: an append-only file bounded by max bytes.
type logFile struct {
	mu      sync.Mutex
	f       *os.File
	size    int64
	max     int64
	dropped int64
}

// openLog opens (appending: a re-run keeps the earlier attempt's lines)
// the log of build id.
func openLog(dir string, id model.BuildID, max int64) (*logFile, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("build log dir: %w", err)
	}
	f, err := os.OpenFile(LogPath(dir, id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open build log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open build log: %w", err)
	}
	return &logFile{f: f, size: fi.Size(), max: max}, nil
}

// Write keeps what fits under the bound and counts the rest; it always
// reports all of p as written, so a command writing to it never fails.
func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := int64(len(p))
	if room := l.max - l.size; keep > room {
		keep = max(room, 0)
	}
	if keep > 0 {
		n, err := l.f.Write(p[:keep])
		l.size += int64(n)
		if err != nil {
			l.dropped += int64(len(p) - n)
			return len(p), nil
		}
	}
	l.dropped += int64(len(p)) - keep
	return len(p), nil
}

// Printf writes one line.
func (l *logFile) Printf(format string, args ...any) {
	_, _ = fmt.Fprintf(l, format+"\n", args...)
}

// Close writes the dropped-bytes line, if any (past the bound: it is the
// only thing allowed beyond it), and closes the file.
func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 {
		_, _ = fmt.Fprintf(l.f, "\n[airlock: the build log reached its limit of %d bytes; %d more bytes were dropped]\n", l.max, l.dropped)
		l.dropped = 0
	}
	return l.f.Close()
}
