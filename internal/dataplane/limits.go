package dataplane

import (
	"fmt"
)

// The caps of DataPlane.limits on open attachments, in the order New
// gives them to streamlimit.New.
const (
	attachCapProcess = iota // Config.AttachPerProcess, by process ID
	attachCapToken          // Config.AttachPerToken, by the attachment token's ID (jti)
	attachCapProject        // Config.AttachPerProject, by project
)

// acquireAttachment counts one attachment of t, or says which limit it
// would pass. The returned release must be called once the attachment
// ends.
func (d *DataPlane) acquireAttachment(t target) (release func(), err error) {
	proc := t.pid.String()
	release, full := d.limits.Acquire(proc, t.claims.TokenID, t.cs.ProjectID.String())
	switch full {
	case attachCapProcess:
		return nil, fmt.Errorf("process %s has %d attachments open, the most allowed; close one first", proc, d.limits.Max(full))
	case attachCapToken:
		return nil, fmt.Errorf("this attachment token has %d attachments open, the most allowed; close one first", d.limits.Max(full))
	case attachCapProject:
		return nil, fmt.Errorf("the project has %d attachments open, the most allowed; close some first", d.limits.Max(full))
	}
	return release, nil
}
