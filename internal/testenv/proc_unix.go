//go:build unix && !linux

package testenv

import "syscall"

// procAttr runs a server as cred's user (nil: this process's user) in a
// process group of its own. There is no parent-death signal outside Linux:
// a server outlives a test binary that is killed before Main stops it.
func procAttr(cred *syscall.Credential, _ syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
