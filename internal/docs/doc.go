// Package docs holds repository-wide checks on the source and its
// documentation, run as ordinary tests, as tailscale does: every package
// documents itself and has a row in the package table of
// docs/architecture.md; every link in the README and docs/ stays in the
// repository and leads to a file and heading that exist; the quick start's
// configuration loads.
package docs
