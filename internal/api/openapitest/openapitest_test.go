package openapitest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// testDoc is a small 3.1 document exercising 2020-12 keywords.
const testDoc = `{
 "openapi": "3.1.0",
 "info": {"title": "t", "version": "1"},
 "security": [{"key": []}],
 "paths": {
  "/things/{id}": {
   "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^t_[a-z]{3}$"}}],
   "post": {
    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Req"}}}},
    "responses": {
     "201": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Resp"}}}},
     "400": {"description": "bad", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    }
   }
  }
 },
 "components": {
  "securitySchemes": {"key": {"type": "http", "scheme": "bearer"}},
  "schemas": {
   "Req": {"type": "object", "additionalProperties": false, "properties": {"args": {"type": "array", "minItems": 1, "prefixItems": [{"type": "string", "minLength": 1}], "items": {"type": "string"}}}},
   "Resp": {"type": "object", "additionalProperties": false, "required": ["x", "k"], "properties": {"x": {"type": ["string", "null"]}, "k": {"const": "fixed"}}},
   "Error": {"type": "object", "additionalProperties": false, "required": ["code", "message"], "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}
  }
 }
}`

// TestValidatorCatchesDrift shows that the validator is not a rubber stamp:
// each case breaks the document in one way and must be reported.
func TestValidatorCatchesDrift(t *testing.T) {
	ctx := context.Background()
	v, err := New(ctx, []byte(testDoc))
	if err != nil {
		t.Fatal(err)
	}
	req := func(path, body string, auth bool) *http.Request {
		r := httptest.NewRequest("POST", "http://h"+path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if auth {
			r.Header.Set("Authorization", "Bearer x")
		}
		return r
	}
	json := http.Header{"Content-Type": {"application/json"}}
	cases := []struct {
		name            string
		path, body      string
		auth            bool
		status          int
		header          http.Header
		resp            string
		wantReq, wantOK bool // request valid, response valid
	}{
		{"valid", "/things/t_abc", `{"args":["ls"]}`, true, 201, json, `{"x":null,"k":"fixed"}`, true, true},
		{"unknown request field", "/things/t_abc", `{"args":["ls"],"zz":1}`, true, 201, json, `{"x":"a","k":"fixed"}`, false, true},
		{"prefixItems", "/things/t_abc", `{"args":[""]}`, true, 400, json, `{"code":"c","message":"m"}`, false, true},
		{"bad path param", "/things/t_ABC", `{}`, true, 400, json, `{"code":"c","message":"m"}`, false, true},
		{"no credentials", "/things/t_abc", `{}`, false, 201, json, `{"x":"a","k":"fixed"}`, false, true},
		{"undocumented status", "/things/t_abc", `{}`, true, 409, json, `{"code":"c","message":"m"}`, true, false},
		{"extra response field", "/things/t_abc", `{}`, true, 201, json, `{"x":"a","k":"fixed","y":1}`, true, false},
		{"type array", "/things/t_abc", `{}`, true, 201, json, `{"x":1,"k":"fixed"}`, true, false},
		{"const", "/things/t_abc", `{}`, true, 201, json, `{"x":"a","k":"other"}`, true, false},
		{"wrong content type", "/things/t_abc", `{}`, true, 201, http.Header{"Content-Type": {"text/plain"}}, `{"x":"a","k":"fixed"}`, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := req(c.path, c.body, c.auth)
			ex := v.CheckRequest(ctx, r, []byte(c.body))
			reqOK := ex.RouteErr == nil && ex.ReqErr == nil
			if reqOK != c.wantReq {
				t.Fatalf("request valid = %v, want %v (route: %v, request: %v)", reqOK, c.wantReq, ex.RouteErr, ex.ReqErr)
			}
			err := v.CheckResponse(ctx, ex, c.status, c.header, []byte(c.resp))
			if (err == nil) != c.wantOK {
				t.Fatalf("response valid = %v, want %v: %v", err == nil, c.wantOK, err)
			}
		})
	}
}

func TestUnroutedMustBeErrorJSON(t *testing.T) {
	ctx := context.Background()
	v, err := New(ctx, []byte(testDoc))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "http://h/nope", nil)
	ex := v.CheckRequest(ctx, r, nil)
	if ex.RouteErr == nil {
		t.Fatal("an undocumented path was routed")
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if err := v.CheckResponse(ctx, ex, 404, h, []byte(`{"code":"not_found","message":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if err := v.CheckResponse(ctx, ex, 404, h, []byte(`not found`)); err == nil {
		t.Fatal("plain-text 404 accepted")
	}
	if err := v.CheckResponse(ctx, ex, 200, h, []byte(`{"code":"x","message":"x"}`)); err == nil {
		t.Fatal("200 for an undocumented path accepted")
	}
}

func TestRejectsNon31(t *testing.T) {
	doc := strings.Replace(testDoc, `"3.1.0"`, `"3.0.3"`, 1)
	if _, err := New(context.Background(), []byte(doc)); err == nil {
		t.Fatal("a 3.0 document was accepted")
	}
}
