package apiv1

// TemplateConfig is a template's runtime configuration, from its manifest.
type TemplateConfig struct {
	Env        []string `json:"env"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// The start and ready commands (docs/templates.md) and, with a ready
	// command, how long it may take to succeed (the default when the
	// template sets none), in milliseconds.
	StartCmd       string `json:"start_cmd,omitempty"`
	ReadyCmd       string `json:"ready_cmd,omitempty"`
	ReadyTimeoutMS int64  `json:"ready_timeout_ms,omitempty"`
}

// SetTemplateTagRequest is the body of PUT /v1/templates/tags/{name_tag}
// (admin): point the tag at the template that Template (a digest or a
// name[:tag]) names now, creating or moving the tag.
type SetTemplateTagRequest struct {
	Template string `json:"template"`
}

// TemplateDeleted is the response of DELETE /v1/templates/{ref} (admin). By
// name[:tag] only that tag goes (Deleted false); by digest the template and
// its tags go.
type TemplateDeleted struct {
	Digest      string   `json:"digest"`
	Deleted     bool     `json:"deleted"`      // the template itself was deleted
	RemovedTags []string `json:"removed_tags"` // "name:tag"
}

// TemplateGCResult is the response of POST /v1/admin/templates/gc.
type TemplateGCResult struct {
	// Collected are the templates deleted by this run: no tag, no live
	// sandbox used them.
	Collected []string `json:"collected"`
	// TreesRemoved are the digests whose trees left the disk: collected
	// now, deleted before, or left without a record by a crash.
	TreesRemoved []string `json:"trees_removed"`
	// Busy: an import was running, so some trees stay until the next run.
	Busy bool `json:"busy"`
}
