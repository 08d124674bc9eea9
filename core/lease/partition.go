package lease

import "context"

// Partition is a fixed set of roles, {name}:partition-0 … {name}:partition-N-1,
// that a stable key selects among. One process may hold several partitions;
// nothing balances them.
type Partition struct {
	name   string
	leases []*Lease
}

// Target is the partition a key resolves to, as this instance sees it.
type Target struct {
	// Role is the partition's role name, e.g. "devices:partition-7".
	Role string
	// Index is the partition number, 0 to Count-1.
	Index int
	// IsHeld reports whether this instance holds the partition now.
	IsHeld bool
	// HolderAddress is the holder's advertised address as of the last
	// heartbeat ("" when unknown).
	HolderAddress string
}

// Name is the partition set's name.
func (p *Partition) Name() string { return p.name }

// Count is the number of partitions.
func (p *Partition) Count() int { return len(p.leases) }

// Lease returns partition i's lease.
func (p *Partition) Lease(i int) *Lease { return p.leases[i] }

// Index is the partition a key belongs to: the 64-bit FNV-1a hash of the
// key's UTF-8 bytes, modulo Count. The function is fixed (docs/partitions.md
// has test vectors) so other languages can route the same way.
func (p *Partition) Index(key string) int {
	return int(fnvString(fnvOffset, key) % uint64(len(p.leases)))
}

// IndexScoped is Index for a key within a scope: the hash runs over the
// scope's bytes, one 0x1F byte, then the key's bytes.
func (p *Partition) IndexScoped(scope, key string) int {
	h := fnvString(fnvOffset, scope)
	h = fnvByte(h, 0x1F)
	return int(fnvString(h, key) % uint64(len(p.leases)))
}

// Resolve returns the partition key belongs to, with the locally cached
// holder view. It does no I/O and allocates nothing.
func (p *Partition) Resolve(key string) Target { return p.target(p.Index(key)) }

// ResolveScoped is Resolve for a key within a scope (see IndexScoped).
func (p *Partition) ResolveScoped(scope, key string) Target {
	return p.target(p.IndexScoped(scope, key))
}

func (p *Partition) target(i int) Target {
	l := p.leases[i]
	return Target{Role: l.role, Index: i, IsHeld: l.IsHeld(), HolderAddress: l.CurrentHolderAddress()}
}

// Close closes every partition's lease (see Lease.Close).
func (p *Partition) Close(ctx context.Context) error {
	var first error
	for _, l := range p.leases {
		if err := l.Close(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, s[i])
	}
	return h
}

func fnvByte(h uint64, b byte) uint64 {
	h ^= uint64(b)
	return h * fnvPrime
}
