package etcd_test

// childRoles are the child processes this test binary can run, beside the
// etcd members.
var childRoles = map[string]func([]string) int{}
