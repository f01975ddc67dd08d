// Package archtest enforces the repository's architecture rules in tests:
// no production Go file over 1000 lines, no catch-all package names, every
// file gofmt-clean, and only internal/rootfs/treecopy copies root
// filesystem trees (copier_test.go says exactly what that rule matches).
// It has no production code.
package archtest
