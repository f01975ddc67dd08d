package dataplane

import (
	"fmt"
	"sync"
)

// attachLimits counts open attachments per process, token and project.
type attachLimits struct {
	perProcess, perToken, perProject int

	mu      sync.Mutex
	process map[string]int
	token   map[string]int // by the token's ID (jti)
	project map[string]int
}

func newAttachLimits(perProcess, perToken, perProject int) *attachLimits {
	return &attachLimits{perProcess: perProcess, perToken: perToken, perProject: perProject,
		process: map[string]int{}, token: map[string]int{}, project: map[string]int{}}
}

// acquire counts one attachment of t, or says which limit it would pass.
// The returned release must be called once the attachment ends.
func (l *attachLimits) acquire(t target) (release func(), err error) {
	proc, proj, tok := t.pid.String(), t.cs.ProjectID.String(), t.claims.TokenID
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.process[proc] >= l.perProcess:
		return nil, fmt.Errorf("process %s has %d attachments open, the most allowed; close one first", proc, l.perProcess)
	case l.token[tok] >= l.perToken:
		return nil, fmt.Errorf("this attachment token has %d attachments open, the most allowed; close one first", l.perToken)
	case l.project[proj] >= l.perProject:
		return nil, fmt.Errorf("the project has %d attachments open, the most allowed; close some first", l.perProject)
	}
	l.process[proc]++
	l.token[tok]++
	l.project[proj]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			decr(l.process, proc)
			decr(l.token, tok)
			decr(l.project, proj)
		})
	}, nil
}

func decr[K comparable](m map[K]int, k K) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}
