//go:build !linux

package main

import "syscall"

// childSysProcAttr: elsewhere the bench stops its children on every exit
// path it sees, but they outlive a bench killed with SIGKILL.
func childSysProcAttr() *syscall.SysProcAttr { return nil }
