package dataplane

import (
	"fmt"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/connbudget"
	"github.com/airlockdev/airlock/internal/model"
)

// The caps of DataPlane.limits on open attachments, in the order New
// gives them to streamlimit.New.
const (
	attachCapProcess = iota // Config.AttachPerProcess, by process ID
	attachCapToken          // Config.AttachPerToken, by the attachment token's ID (jti)
	attachCapProject        // Config.AttachPerProject, by project
	attachCapServer         // Config.AttachTotal, one key: every attachment of this server
)

// serverKey is the one key of attachCapServer.
const serverKey = "server"

// acquireAttachment counts one attachment of t, or says which limit it
// would pass. The returned release must be called once the attachment
// ends.
func (d *DataPlane) acquireAttachment(t target) (release func(), err error) {
	proc := t.pid.String()
	release, full := d.limits.Acquire(proc, t.claims.TokenID, t.cs.ProjectID.String(), serverKey)
	switch full {
	case attachCapProcess:
		return nil, fmt.Errorf("process %s has %d attachments open, the most allowed; close one first", proc, d.limits.Max(full))
	case attachCapToken:
		return nil, fmt.Errorf("this attachment token has %d attachments open, the most allowed; close one first", d.limits.Max(full))
	case attachCapProject:
		return nil, fmt.Errorf("the project has %d attachments open, the most allowed; close some first", d.limits.Max(full))
	case attachCapServer:
		return nil, fmt.Errorf("this server has %d attachments open, the most it holds (--max-attachments); retry later", d.limits.Max(full))
	}
	return release, nil
}

// The caps of DataPlane.stdins on open stdin streams, in the order New
// gives them to streamlimit.New.
const (
	stdinCapToken   = iota // Config.StdinPerToken, by the attachment token's ID (jti)
	stdinCapProject        // Config.StdinPerProject, by project
)

// acquireStdin counts one stdin stream of t, or says which limit it would
// pass. The returned release must be called once the stream ends.
func (d *DataPlane) acquireStdin(t target) (release func(), err error) {
	release, full := d.stdins.Acquire(t.claims.TokenID, t.cs.ProjectID.String())
	switch full {
	case stdinCapToken:
		return nil, fmt.Errorf("this attachment token has %d stdin streams open, the most allowed; end one first", d.stdins.Max(full))
	case stdinCapProject:
		return nil, fmt.Errorf("the project has %d stdin streams open, the most allowed; end some first", d.stdins.Max(full))
	}
	return release, nil
}

// connectionAuthenticated tells the server's connection budget that the
// request's connection carried a valid token of project (see
// internal/connbudget); at the project's cap of connections it answers 429
// too_many_connections, closes the connection and returns false.
func connectionAuthenticated(w http.ResponseWriter, r *http.Request, project model.ProjectID) bool {
	if err := connbudget.Authenticated(r.Context(), "project:"+project.String()); err != nil {
		w.Header().Set("Connection", "close")
		writeError(w, apiv1.CodeTooManyConnections, err.Error()+"; close some of them first")
		return false
	}
	return true
}
