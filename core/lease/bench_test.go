package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lease"
)

func BenchmarkIsHeld(b *testing.B) {
	store := newFakeStore()
	m, err := lease.NewManager(lease.Config{Store: store, InstanceID: "a", LeaseDuration: time.Hour, RenewInterval: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	l, _ := m.Register("r")
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	defer func() {
		m.Close(context.Background())
		<-done
	}()
	for !l.IsHeld() {
		time.Sleep(time.Millisecond)
	}
	b.Run("holder", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			if l.IsHeld() {
				n++
			}
		}
	})
	other, _ := m.Register("never-started-elsewhere")
	_ = other.Close(context.Background())
	b.Run("non-holder", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			if other.IsHeld() {
				n++
			}
		}
	})
}

func BenchmarkResolve(b *testing.B) {
	_, p := newPartition(b, 16)
	b.ReportAllocs()
	for b.Loop() {
		_ = p.Resolve("device-42")
	}
}

func BenchmarkResolveScoped(b *testing.B) {
	_, p := newPartition(b, 16)
	b.ReportAllocs()
	for b.Loop() {
		_ = p.ResolveScoped("Order", "order-123456")
	}
}
