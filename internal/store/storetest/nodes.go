package storetest

// nodeTests is the conformance group of store.Nodes.
func nodeTests() []namedTest { return nil }
