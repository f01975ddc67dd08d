package agentclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Every byte an agent sends is the guest's: the host reads none of it
// without a bound. What an agent of this repository sends stays far below
// each bound; beyond it the call fails with an error matching
// ErrResponseTooLarge.
const (
	// maxInfoBytes bounds GET /v1/info (the handshake).
	maxInfoBytes = 64 << 10
	// maxJSONBytes bounds a JSON response about one thing: a process's
	// status, a file's info, a tar result.
	maxJSONBytes = 1 << 20
	// maxListBytes bounds the process list and a directory listing (at most
	// agentproto.MaxListEntries entries).
	maxListBytes = 16 << 20
	// maxErrorBytes bounds an error response's body, and maxErrorMessage
	// the message of it that the host keeps (it ends up in logs and in
	// API errors).
	maxErrorBytes   = 64 << 10
	maxErrorMessage = 1 << 10
	// maxLogBytes bounds GET /v1/logs (the agent's ring holds 1 MiB).
	maxLogBytes = 4 << 20
	// maxRunOutput bounds the stdout and stderr that Run collects in
	// memory together.
	maxRunOutput = 64 << 20
	// maxHeaderBytes bounds the headers of one response.
	maxHeaderBytes = 64 << 10
)

// ErrResponseTooLarge: the agent sent more than the host reads for that
// kind of response (a hostile or broken guest).
var ErrResponseTooLarge = errors.New("agent: response too large")

// readCapped reads all of r if it holds at most limit bytes.
func readCapped(r io.Reader, limit int64, what string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrResponseTooLarge, what, limit)
	}
	return data, nil
}

// decodeCapped decodes one JSON value of at most limit bytes from r.
func decodeCapped(r io.Reader, limit int64, what string, out any) error {
	data, err := readCapped(r, limit, what)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode %s: %w", what, err)
	}
	return nil
}
