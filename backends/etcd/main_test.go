package etcd_test

import (
	"testing"

	"github.com/baton-go/baton/backends/etcd/internal/etcdtest"
	"github.com/baton-go/baton/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.RunChild(etcdtest.Roles(childRoles))
	testenv.Main(m)
}
