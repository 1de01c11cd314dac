package direct

// The agent's side: where and under which names it serves the endpoint.
const (
	// ServiceName is the downstream Service of the agent's direct endpoint,
	// in the agent's namespace.
	ServiceName = "fleet-agent-direct"
	// TLSSecretName holds the endpoint's serving certificate and its CA
	// (made by the agent when missing, or brought by the operator).
	TLSSecretName = "fleet-agent-direct-tls"
	// StateConfigMapName keeps the signing keys and the revocation list the
	// agent last read, so a restarted agent verifies tokens while the
	// upstream is unreachable.
	StateConfigMapName = "fleet-agent-direct-state"
	// Port is the container port of the endpoint.
	Port = 8443
	// AuthenticatePath is the token webhook (TokenReview) the downstream API
	// server may call (mode webhook).
	AuthenticatePath = "/authenticate"
)
