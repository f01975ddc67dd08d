package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/textclip"
)

// fieldSet is the set of top-level JSON fields a request body contained.
type fieldSet map[string]bool

// readBody reads a request body of at most limit bytes after checking its
// Content-Type.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil, errorf(apiv1.CodeUnsupportedMedia, "Content-Type must be application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return nil, errorf(apiv1.CodeUnsupportedMedia, "Content-Type must be application/json, not %q", textclip.Bytes(ct, maxEcho))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return nil, errorf(apiv1.CodeUnsupportedMedia, "the only charset accepted is utf-8")
	}
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	if int64(len(body)) > limit {
		return nil, tooLarge(limit)
	}
	return body, nil
}

func tooLarge(limit int64) error {
	return errorf(apiv1.CodePayloadTooLarge, "the request body is larger than %d bytes", limit)
}

// decodeStrict decodes one JSON object into dst, a pointer to a flat wire
// struct. Unlike encoding/json it refuses, with a 400: anything but an
// object, field names that match a struct field only case-insensitively,
// unknown fields, null values, duplicate fields and trailing data. It returns
// the set of fields present, so callers can tell "absent" from "zero". A
// type with a nullable() method accepts null fields, as if absent.
func decodeStrict(body []byte, dst any) (fieldSet, error) {
	_, nullable := dst.(interface{ nullable() })
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, badRequest("the request body must be a JSON object: %s", jsonErr(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, badRequest("the request body must be a JSON object")
	}
	known := jsonFields(reflect.TypeOf(dst).Elem())
	present := fieldSet{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, badRequest("malformed JSON: %s", jsonErr(err))
		}
		name := tok.(string) // object keys are always strings
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, badRequest("malformed JSON: %s", jsonErr(err))
		}
		if !known[name] {
			return nil, badRequest("unknown field %q", textclip.Bytes(name, maxEcho))
		}
		if present[name] {
			return nil, badRequest("duplicate field %q", name)
		}
		if string(raw) == "null" {
			if nullable {
				continue
			}
			return nil, badRequest("field %q must not be null", name)
		}
		present[name] = true
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, badRequest("malformed JSON: %s", jsonErr(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, badRequest("unexpected data after the JSON object")
	}
	// The structure is now known to be sound; decode the values into their types.
	strict := json.NewDecoder(bytes.NewReader(body))
	strict.DisallowUnknownFields()
	if err := strict.Decode(dst); err != nil {
		return nil, badRequest("%s", jsonErr(err))
	}
	return present, nil
}

// jsonErr turns encoding/json errors into messages for the client.
func jsonErr(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "value"
		}
		return fmt.Sprintf("field %q must be %s, not a JSON %s", field, jsonKind(te.Type), te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d: %s", se.Offset, se.Error())
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "unexpected end of input"
	}
	return err.Error()
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Slice:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Bool:
		return "a boolean"
	}
	return t.String()
}

// jsonFields returns the JSON names of a struct's exported fields.
func jsonFields(t reflect.Type) map[string]bool {
	m := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = true
	}
	return m
}

// maxEcho is how many bytes of client input an error message quotes (textclip.Bytes).
const maxEcho = 80
