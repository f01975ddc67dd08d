// Package archtest enforces the repository's architecture rules in tests:
// no production Go file over 1000 lines, no catch-all package names, every
// file gofmt-clean, only internal/rootfs/treecopy copies root filesystem
// trees (copier_test.go says exactly what that rule matches), and the
// import rules between layers (imports_test.go: one table, checked
// against one `go list -deps` of the module), and the product binary
// cmd/airlock links none of the benchmarks (product_test.go). It has no
// production code.
package archtest
