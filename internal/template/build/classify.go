package build

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// classify turns a failed build's error into the code and message stored
// with it. A source that does not exist or may not be read, and an image a
// registry refuses, are the requester's fault (invalid_request); a registry
// that cannot be reached is registry_unavailable; a template pulled by
// digest that the blob store lacks is template_not_found, one that does not
// verify blob_store_corrupt, a blob store that fails blob_store_unavailable;
// the rest is build_failed (a full disk of the server's among them, said as
// such). authed says whether the pull presented credentials.
func classify(source string, authed bool, err error) *model.BuildError {
	var (
		te *transport.Error
		ue *url.Error
		oe *net.OpError
		de *net.DNSError
	)
	switch {
	case errors.As(err, &te):
		switch te.StatusCode {
		case http.StatusNotFound, http.StatusUnauthorized, http.StatusForbidden, http.StatusBadRequest:
			how := "anonymously"
			if authed {
				how = "with the credentials given"
			}
			return &model.BuildError{Code: apiv1.CodeInvalidRequest, Message: fmt.Sprintf(
				"cannot import %s: the registry answered %d (%s): the image does not exist or may not be read %s", source, te.StatusCode, registryDetail(te), how)}
		}
		return &model.BuildError{Code: apiv1.CodeRegistryUnavailable, Message: fmt.Sprintf("cannot import %s: the registry answered %d: %s", source, te.StatusCode, registryDetail(te))}
	case errors.Is(err, fs.ErrNotExist):
		return &model.BuildError{Code: apiv1.CodeInvalidRequest, Message: "source " + source + " does not exist on the server host: " + err.Error()}
	case errors.Is(err, fs.ErrPermission):
		return &model.BuildError{Code: apiv1.CodeInvalidRequest, Message: "the server may not read source " + source + ": " + err.Error()}
	case errors.Is(err, template.ErrNotFound):
		return &model.BuildError{Code: apiv1.CodeTemplateNotFound, Message: err.Error()}
	case errors.Is(err, template.ErrCorrupt) && strings.HasPrefix(source, "sha256:"):
		return &model.BuildError{Code: apiv1.CodeBlobStoreCorrupt, Message: "nothing was imported: " + err.Error()}
	case errors.Is(err, errBlobStore):
		return &model.BuildError{Code: apiv1.CodeBlobStoreUnavailable, Message: err.Error()}
	case errors.Is(err, errNotSupported), errors.Is(err, recipe.ErrNoSandbox):
		return &model.BuildError{Code: apiv1.CodeNotSupported, Message: err.Error()}
	case errors.Is(err, model.ErrInvalid):
		return &model.BuildError{Code: apiv1.CodeInvalidRequest, Message: err.Error()}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		// Before the network case: a syscall.Errno is a net.Error too.
		return &model.BuildError{Code: apiv1.CodeBuildFailed, Message: "cannot import " + source + ": the server's disk is full: " + err.Error()}
	case errors.As(err, &ue), errors.As(err, &oe), errors.As(err, &de):
		return &model.BuildError{Code: apiv1.CodeRegistryUnavailable, Message: "cannot import " + source + ": the registry could not be reached: " + err.Error()}
	}
	return &model.BuildError{Code: apiv1.CodeBuildFailed, Message: err.Error()}
}

// registryDetail is the registry's own error codes, or its status text.
func registryDetail(te *transport.Error) string {
	var codes []string
	for _, d := range te.Errors {
		codes = append(codes, string(d.Code))
	}
	if len(codes) == 0 {
		return http.StatusText(te.StatusCode)
	}
	return strings.Join(codes, ", ")
}
