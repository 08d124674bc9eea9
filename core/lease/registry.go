package lease

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Registry lists the leases and partitions registered with one Manager, for
// infrastructure that looks roles up by name (the holder proxy, a status
// page). A role appears once: registering it twice is ErrDuplicateRole.
type Registry struct {
	mu         sync.RWMutex
	leases     map[string]*Lease
	partitions map[string]*Partition
}

func newRegistry() *Registry {
	return &Registry{leases: map[string]*Lease{}, partitions: map[string]*Partition{}}
}

// Lease returns the registered lease for role.
func (r *Registry) Lease(role string) (*Lease, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	l, ok := r.leases[role]
	return l, ok
}

// Partition returns the registered partition set called name.
func (r *Registry) Partition(name string) (*Partition, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.partitions[name]
	return p, ok
}

// Leases returns every registered lease, ordered by role.
func (r *Registry) Leases() []*Lease {
	all := r.all()
	slices.SortFunc(all, func(a, b *Lease) int { return strings.Compare(a.role, b.role) })
	return all
}

func (r *Registry) all() []*Lease {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Lease, 0, len(r.leases))
	for _, l := range r.leases {
		out = append(out, l)
	}
	return out
}

// add registers leases (and the partition they form, if p is not nil): all
// of them, or none when any role or the partition name is taken.
func (r *Registry) add(p *Partition, leases ...*Lease) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p != nil {
		if _, dup := r.partitions[p.name]; dup {
			return fmt.Errorf("%w: partition %q", ErrDuplicateRole, p.name)
		}
	}
	for _, l := range leases {
		if _, dup := r.leases[l.role]; dup {
			return fmt.Errorf("%w: %q", ErrDuplicateRole, l.role)
		}
	}
	for _, l := range leases {
		r.leases[l.role] = l
	}
	if p != nil {
		r.partitions[p.name] = p
	}
	return nil
}

func (r *Registry) remove(l *Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leases[l.role] == l {
		delete(r.leases, l.role)
	}
}
