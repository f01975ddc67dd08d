package model

import (
	"crypto/rand"
	"fmt"
	"regexp"
	"time"

	"github.com/airlockdev/airlock/internal/textclip"
)

// E2BBuildID identifies one template build of E2B's template build API
// (templates as code): a random (version 4) UUID in lower-case hex, as
// E2B's own build IDs are, since the SDK shows and passes it back as is.
type E2BBuildID string

var e2bBuildIDRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// NewE2BBuildID returns a new random E2B build ID.
func NewE2BBuildID() E2BBuildID {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return E2BBuildID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]))
}

// ParseE2BBuildID parses s as an E2B build ID.
func ParseE2BBuildID(s string) (E2BBuildID, error) {
	if !e2bBuildIDRe.MatchString(s) {
		return "", fmt.Errorf("%w: E2B build ID %q must be a version 4 UUID in lower-case hex", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	return E2BBuildID(s), nil
}

func (id E2BBuildID) String() string { return string(id) }

// E2BBuildStatus is where an E2B template build is. E2B's SDK sees
// waiting (requested, and starting), building, ready and error.
type E2BBuildStatus string

// E2B build statuses.
const (
	// E2BBuildWaiting: requested (POST /v3/templates); not started yet.
	E2BBuildWaiting E2BBuildStatus = "waiting"
	// E2BBuildStarting: a server is laying out its files and queueing its
	// native build (Node names it); a server that stops meanwhile leaves
	// it here, and the reconcilers end it in error.
	E2BBuildStarting E2BBuildStatus = "starting"
	// E2BBuildBuilding: its native build (Native) is queued or running.
	E2BBuildBuilding E2BBuildStatus = "building"
	// E2BBuildReady: the native build succeeded and every tag the build
	// names points at its template.
	E2BBuildReady E2BBuildStatus = "ready"
	// E2BBuildError: it failed (Reason says why).
	E2BBuildError E2BBuildStatus = "error"
)

// ParseE2BBuildStatus parses an E2B build status.
func ParseE2BBuildStatus(s string) (E2BBuildStatus, error) {
	switch st := E2BBuildStatus(s); st {
	case E2BBuildWaiting, E2BBuildStarting, E2BBuildBuilding, E2BBuildReady, E2BBuildError:
		return st, nil
	}
	return "", fmt.Errorf("%w: E2B build status %q", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// Ended reports whether the build is over (ready or error).
func (s E2BBuildStatus) Ended() bool { return s == E2BBuildReady || s == E2BBuildError }

// MaxE2BBuildTags bounds the further tags one E2B build names.
const MaxE2BBuildTags = 32

// E2BBuild is one E2B template build as the store keeps it.
type E2BBuild struct {
	ID        E2BBuildID
	ProjectID ProjectID // the project of the key that requested it
	// TemplateID is E2B's templateID: the name of the template built.
	TemplateID TemplateName
	// Name is the name:tag the native build names; Tags are further tags
	// of Name's name pointed at its template once it is built.
	Name TaggedName
	Tags []TemplateTag
	// Files are the uploaded archives (SHA-256 in hex) its COPY steps use.
	Files  []string
	Status E2BBuildStatus
	Reason string  // why it failed; "" otherwise
	Native BuildID // its native build, once queued
	// Node is the server that started it ("" before).
	Node      NodeID
	CreatedAt time.Time
	UpdatedAt time.Time
}
