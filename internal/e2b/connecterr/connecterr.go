// Package connecterr turns errors of Airlock's API, as internal/client
// reports them, into the Connect errors E2B clients expect from envd, for
// the process and filesystem services alike. Each code's Connect code is
// apiv1's (its error vocabulary, apiv1.ErrorSpecs); the HTTP status decides
// only for an error without a known code.
package connecterr

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

// From returns err as a Connect error: a Connect error unchanged, else one
// whose code is chosen by the native error code first, then by the HTTP
// status; a failure below HTTP is unavailable, an ended context canceled
// or deadline_exceeded. what, when not empty, prefixes the message.
func From(ctx context.Context, what string, err error) *connect.Error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	if ctx != nil && ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return connect.NewError(connect.CodeDeadlineExceeded, err)
		}
		return connect.NewError(connect.CodeCanceled, err)
	}
	return connect.NewError(Code(err), err)
}

// Code is the Connect code for an error of Airlock's API: the one apiv1's
// vocabulary gives its code, else the one its HTTP status suggests.
func Code(err error) connect.Code {
	var api *client.APIError
	if !errors.As(err, &api) {
		switch {
		case errors.Is(err, context.Canceled):
			return connect.CodeCanceled
		case errors.Is(err, context.DeadlineExceeded):
			return connect.CodeDeadlineExceeded
		}
		// A transport failure between the translator and the native API.
		return connect.CodeUnavailable
	}
	if c, ok := codes[api.Code]; ok {
		return c
	}
	return statusCode(api.Status)
}

// codes is the Connect code of each of Airlock's error codes, parsed once
// from apiv1's vocabulary (where it is kept by its wire name). A name that
// does not parse is left out, its code then mapped by its HTTP status; the
// package's test fails on it.
var codes = func() map[string]connect.Code {
	m := make(map[string]connect.Code)
	for _, s := range apiv1.ErrorSpecs() {
		if c, ok := parse(s.Connect); ok {
			m[s.Code] = c
		}
	}
	return m
}()

// parse returns the Connect code whose wire name is name ("not_found").
func parse(name string) (connect.Code, bool) {
	var c connect.Code
	return c, c.UnmarshalText([]byte(name)) == nil
}

// statusCode maps an HTTP status of the native API to a Connect code.
func statusCode(status int) connect.Code {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusConflict:
		return connect.CodeFailedPrecondition
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	case http.StatusNotImplemented:
		return connect.CodeUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return connect.CodeUnavailable
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeInternal
}
