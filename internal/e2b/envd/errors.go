package envd

import (
	"context"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/e2b/connecterr"
)

// nativeError turns an error of Airlock's API (through internal/client)
// into the Connect error an E2B client expects (connecterr's table).
func nativeError(err error) *connect.Error {
	return connecterr.From(context.Background(), "", err)
}
