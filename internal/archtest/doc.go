// Package archtest holds repository-wide checks on the shape of the code,
// run as ordinary tests: the import rules between the project's layers
// (imports_test.go) and the size limits of functions (funcsize_test.go).
// It has no non-test code besides this comment.
package archtest
