package testenv

import "syscall"

// procAttr runs a server as cred's user (nil: this process's user) in a
// process group of its own, so that a terminal's Ctrl-C reaches the test
// binary and not the server. deathSig, when not 0, is sent to the server if
// the test binary dies before stopping it.
func procAttr(cred *syscall.Credential, deathSig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: deathSig}
}
