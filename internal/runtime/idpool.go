package runtime

import "fmt"

// IDPool is a pool of host ids that a runtime hands out to its sandboxes:
// Count blocks of the runtime's block size from Base (a runc or crun
// sandbox takes a block of 65536 ids for its user namespace, a QEMU VM one
// id for its process). A zero field takes the runtime's default.
type IDPool struct {
	Base  uint32 // first host id
	Count int    // number of blocks
}

// IDPoolRules are a runtime's defaults and bounds for its IDPool.
type IDPoolRules struct {
	What      string // names the pool in errors: "oci: id pool"
	Base      uint32 // the default Base
	Count     int    // the default Count
	BlockSize uint32 // ids per block
	// MinBase is the lowest Base: host root and the host's users must not
	// map into a sandbox.
	MinBase uint32
}

// WithDefaults fills in rules' defaults and checks p against them. The
// pool ends below 2^32-1, which set*id reads as "unchanged".
func (p IDPool) WithDefaults(rules IDPoolRules) (IDPool, error) {
	if p.Base == 0 {
		p.Base = rules.Base
	}
	if p.Count == 0 {
		p.Count = rules.Count
	}
	if p.Count < 0 {
		return p, fmt.Errorf("%s of %d blocks", rules.What, p.Count)
	}
	if p.Base < rules.MinBase {
		return p, fmt.Errorf("%s base %d must be at least %d: host root and the host's users must not map into a sandbox", rules.What, p.Base, rules.MinBase)
	}
	if end := uint64(p.Base) + uint64(p.Count)*uint64(rules.BlockSize); end > 1<<32-1 {
		return p, fmt.Errorf("%s of %d blocks of %d ids from %d ends beyond the largest id (%d > 4294967295)", rules.What, p.Count, rules.BlockSize, p.Base, end)
	}
	return p, nil
}

// Block is the first id of block i of the pool.
func (p IDPool) Block(i int, blockSize uint32) uint32 { return p.Base + uint32(i)*blockSize }

// Contains reports whether id is one of the pool's.
func (p IDPool) Contains(id uint32, blockSize uint32) bool {
	return id >= p.Base && uint64(id) < uint64(p.Base)+uint64(p.Count)*uint64(blockSize)
}
