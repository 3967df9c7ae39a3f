package main

import "syscall"

// childSysProcAttr puts a bench child in its own process group (a Ctrl-C
// at the terminal reaches the bench alone, which stops the children in
// order) and has the kernel kill it should the bench itself die.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
