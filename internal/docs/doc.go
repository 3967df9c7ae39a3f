// Package docs holds repository-wide checks on the source itself (every
// package documents itself), run as ordinary tests, as tailscale does.
package docs
