package sqlstore

import (
	"errors"
	"fmt"

	"github.com/airlockdev/airlock/internal/model"
)

// columns parses stored values into domain types with the model parsers, so
// a row read from the database is as trustworthy as one parsed at the API:
// a value that does not parse makes the row corrupt, not a raw string that
// travels on. Errors accumulate; check err once after the last call.
type columns struct {
	row string // what the row is, for the error
	err error
}

func (c *columns) fail(column, raw string, err error) {
	c.err = errors.Join(c.err, fmt.Errorf("stored %s: column %s %q: %w", c.row, column, raw, err))
}

func (c *columns) sandboxID(column, raw string) model.SandboxID {
	v, err := model.ParseSandboxID(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

func (c *columns) projectID(column, raw string) model.ProjectID {
	v, err := model.ParseProjectID(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

func (c *columns) operationID(column, raw string) model.OperationID {
	v, err := model.ParseOperationID(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

func (c *columns) sessionID(column, raw string) model.CommandSessionID {
	v, err := model.ParseCommandSessionID(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

func (c *columns) processID(column, raw string) model.ProcessID {
	v, err := model.ParseProcessID(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

func (c *columns) apiKeyID(column, raw string) model.APIKeyID {
	v, err := model.ParseAPIKeyID(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

// nodeID parses a node ID; "" (not placed yet) stays "".
func (c *columns) nodeID(column, raw string) model.NodeID {
	if raw == "" {
		return ""
	}
	v, err := model.ParseNodeID(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

func (c *columns) digest(column, raw string) model.TemplateDigest {
	v, err := model.ParseTemplateDigest(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

func (c *columns) templateName(column, raw string) model.TemplateName {
	v, err := model.ParseTemplateName(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

func (c *columns) templateTag(column, raw string) model.TemplateTag {
	v, err := model.ParseTemplateTag(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

// guestPath parses a working directory; "" (the default) stays "".
func (c *columns) guestPath(column, raw string) model.GuestPath {
	if raw == "" {
		return ""
	}
	v, err := model.ParseGuestPath(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}

func (c *columns) taggedName(column, raw string) model.TaggedName {
	v, err := model.ParseTaggedName(raw)
	if err != nil {
		c.fail(column, raw, err)
	}
	return v
}
