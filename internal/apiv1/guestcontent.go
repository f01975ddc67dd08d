package apiv1

import "net/http"

// GuestContentHeaders makes content a sandbox controls inert as the
// server's origin, which is the web console's: a guest's HTTP answers
// through the port proxy (/v1/sandboxes/{id}/ports/…) and a guest file's
// bytes from the data plane (/data/…/files/…). A browser renders it as a
// sandboxed document (a unique opaque origin: no cookies, no same-origin
// requests to the API) and sniffs no content type. A policy already in h
// (a guest's own) stands too: every policy is enforced.
func GuestContentHeaders(h http.Header) {
	h.Add("Content-Security-Policy", "sandbox")
	h.Set("X-Content-Type-Options", "nosniff")
}
