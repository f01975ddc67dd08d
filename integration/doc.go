// Package integration holds Airlock's end-to-end tests: they build the real
// `airlock` and `airlock-agent` binaries, start `airlock server` as a separate
// process on a real runtime (runc, crun, runsc) and a real store (SQLite,
// PostgreSQL), and drive it through the CLI and the Go client exactly as a
// user would — including SIGKILLing the server mid-operation. It has no
// production code.
package integration
