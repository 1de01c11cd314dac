package scheme

// KnownKinds are the kinds KnownKindsMapper maps without discovery.
var KnownKinds = knownKinds
