// Package archtest enforces the repository's architecture rules in tests:
// no production Go file over 1000 lines, no catch-all package names, every
// file gofmt-clean. It has no production code.
package archtest
