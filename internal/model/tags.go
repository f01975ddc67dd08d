package model

import (
	"fmt"
	"strings"

	"github.com/airlockdev/airlock/internal/textclip"
)

// TemplateTag is the movable part of a tagged template name, such as
// "latest" or "3.12": 1–128 characters of [A-Za-z0-9_.-], starting with a
// letter, digit or '_' (the rule of OCI image tags).
type TemplateTag string

// DefaultTemplateTag is the tag of a name given without one.
const DefaultTemplateTag TemplateTag = "latest"

// ParseTemplateTag parses s as a template tag.
func ParseTemplateTag(s string) (TemplateTag, error) {
	if len(s) == 0 || len(s) > 128 {
		return "", fmt.Errorf("%w: template tag %q must be 1 to 128 characters", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		word := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
		if i == 0 && !word {
			return "", fmt.Errorf("%w: template tag %q must start with a letter, digit or '_'", ErrInvalid, textclip.Bytes(s, maxEcho))
		}
		if !word && c != '.' && c != '-' {
			return "", fmt.Errorf("%w: template tag %q may contain only A-Z, a-z, 0-9, '_', '.' and '-'", ErrInvalid, textclip.Bytes(s, maxEcho))
		}
	}
	return TemplateTag(s), nil
}

func (t TemplateTag) String() string { return string(t) }

// TaggedName is a template name with its tag, written "name:tag". A tag
// points at one digest at a time and moves; a digest never changes meaning.
type TaggedName struct {
	Name TemplateName
	Tag  TemplateTag
}

// DefaultTemplate is the template that `airlock server` provides out of the
// box and that a sandbox gets when its create names none: "default:latest".
var DefaultTemplate = TaggedName{Name: DefaultTemplateName, Tag: DefaultTemplateTag}

// ParseTaggedName parses "name" (tag "latest") or "name:tag". The names
// sha256, sha384 and sha512 are reserved: "sha256:…" reads as a digest.
func ParseTaggedName(s string) (TaggedName, error) {
	name, tag, hasTag := strings.Cut(s, ":")
	n, err := ParseTemplateName(name)
	if err != nil {
		return TaggedName{}, err
	}
	if name == "sha256" || name == "sha384" || name == "sha512" {
		// "sha256:…" is a digest: such a tag could never be named.
		return TaggedName{}, fmt.Errorf("%w: template name %q is reserved for digests", ErrInvalid, name)
	}
	if !hasTag {
		return TaggedName{Name: n, Tag: DefaultTemplateTag}, nil
	}
	t, err := ParseTemplateTag(tag)
	if err != nil {
		return TaggedName{}, err
	}
	return TaggedName{Name: n, Tag: t}, nil
}

// IsZero reports whether n is the zero TaggedName: no name.
func (n TaggedName) IsZero() bool { return n.Name == "" }

// String is "name:tag", the tag always written; "" for the zero TaggedName.
func (n TaggedName) String() string {
	if n.IsZero() {
		return ""
	}
	return string(n.Name) + ":" + string(n.Tag)
}

// Compare orders tagged names by name, then tag.
func (n TaggedName) Compare(o TaggedName) int {
	if c := strings.Compare(string(n.Name), string(o.Name)); c != 0 {
		return c
	}
	return strings.Compare(string(n.Tag), string(o.Tag))
}
