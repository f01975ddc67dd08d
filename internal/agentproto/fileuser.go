package agentproto

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/textclip"
)

// QueryFileUser is the optional query parameter of every /v1/files
// endpoint that names the user the operation runs as: "<uid>:<gid>", both
// decimal, 0–MaxFileID. With it the agent performs the request's file
// system calls with its effective (so filesystem) UID and GID set to
// that user, so permissions are checked as that user's and files it
// creates belong to it. Supplementary groups stay the agent's own (usually
// none beyond root's): only the primary group is the user's. Without it,
// operations run as the agent itself (root). A bad value is 400
// CodeInvalidFileUser.
const QueryFileUser = "user"

// FeatureFileUser: the /v1/files endpoints take QueryFileUser. An agent
// without it ignores the parameter, so the host must not send a user to it.
const FeatureFileUser = "file-user"

// CodeInvalidFileUser (400): the user query parameter is not "<uid>:<gid>"
// within 0–MaxFileID.
const CodeInvalidFileUser = "invalid_file_user"

// MaxFileID is the largest UID or GID a file user may have (2^32-1 is the
// kernel's "no ID").
const MaxFileID = 1<<32 - 2

// FileUser is the numeric user and primary group a file operation runs as.
type FileUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// String formats u as the query parameter's value, "<uid>:<gid>".
func (u FileUser) String() string {
	return strconv.FormatUint(uint64(u.UID), 10) + ":" + strconv.FormatUint(uint64(u.GID), 10)
}

// ParseFileUser parses "<uid>:<gid>" (decimal, no sign, 0–MaxFileID).
func ParseFileUser(s string) (FileUser, error) {
	us, gs, ok := strings.Cut(s, ":")
	if !ok {
		return FileUser{}, fmt.Errorf("file user %q: want <uid>:<gid>", textclip.Bytes(s, maxEchoValue))
	}
	uid, err := parseFileID(us)
	if err != nil {
		return FileUser{}, fmt.Errorf("file user %q: uid: %w", textclip.Bytes(s, maxEchoValue), err)
	}
	gid, err := parseFileID(gs)
	if err != nil {
		return FileUser{}, fmt.Errorf("file user %q: gid: %w", textclip.Bytes(s, maxEchoValue), err)
	}
	return FileUser{UID: uid, GID: gid}, nil
}

func parseFileID(s string) (uint32, error) {
	if s == "" || len(s) > 10 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("want a decimal number 0–%d", uint64(MaxFileID))
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("no leading zeros")
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > MaxFileID {
		return 0, fmt.Errorf("want a decimal number 0–%d", uint64(MaxFileID))
	}
	return uint32(n), nil
}

// maxEchoValue is how many bytes of a user or group value an error message quotes (textclip.Bytes).
const maxEchoValue = 64
