package build

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
)

func TestClassify(t *testing.T) {
	noSpace := &fs.PathError{Op: "write", Path: "/data/templates/staging/x", Err: syscall.ENOSPC}
	for _, tc := range []struct {
		name string
		err  error
		code string
	}{
		// A full disk is the server's, never a registry's (a
		// syscall.Errno satisfies net.Error: it once read as
		// registry_unavailable).
		{"disk full", fmt.Errorf("build cache: import: %w", noSpace), apiv1.CodeBuildFailed},
		{"quota", &fs.PathError{Op: "write", Path: "/x", Err: syscall.EDQUOT}, apiv1.CodeBuildFailed},
		{"other errno", &fs.PathError{Op: "write", Path: "/x", Err: syscall.EIO}, apiv1.CodeBuildFailed},
		{"dial", &url.Error{Op: "Get", URL: "https://registry.example/v2/", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, apiv1.CodeRegistryUnavailable},
		{"dns", &net.DNSError{Err: "no such host", Name: "registry.example"}, apiv1.CodeRegistryUnavailable},
		{"missing source", fmt.Errorf("open: %w", fs.ErrNotExist), apiv1.CodeInvalidRequest},
		{"plain", errors.New("step 2 exited 1"), apiv1.CodeBuildFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classify("src", false, tc.err)
			if got.Code != tc.code {
				t.Fatalf("classify(%v) = %s (%s), want %s", tc.err, got.Code, got.Message, tc.code)
			}
		})
	}
}
