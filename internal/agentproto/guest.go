package agentproto

// FeatureGuestConfig: PUT /v1/guest (GuestConfig).
const FeatureGuestConfig = "guest-config"

// MinEntropyBytes is the least GuestConfig.Entropy the agent accepts (when
// any is given): 256 bits.
const MinEntropyBytes = 32

// MaxEntropyBytes bounds GuestConfig.Entropy.
const MaxEntropyBytes = 4096

// GuestConfig configures the guest machine a VM agent runs in (PID 1 of a
// microVM); the host sends it after a boot and after every restore of a
// snapshot, before any process starts:
//
//	PUT /v1/guest  GuestConfig → 204
//
// Every field is optional; a zero field leaves that part of the guest as it
// is. A second PUT of the same config changes nothing (idempotent). Bad
// input is 400 CodeInvalidRequest; a step that fails in the guest is 500
// CodeInternal naming the step (the steps before it have been applied).
type GuestConfig struct {
	// Hostname, if set, becomes the guest's host name (sethostname).
	Hostname string `json:"hostname,omitempty"`
	// Env, "NAME=value" entries, is merged over the agent's environment for
	// every process started afterwards (a later entry of the same name
	// wins, and entries of earlier PUTs stay unless overridden).
	// Precedence, lowest first: the agent's own environment, GuestConfig
	// env, StartRequest.Env (per-process env wins).
	Env []string `json:"env,omitempty"`
	// Entropy (base64 in JSON), if set, must hold at least
	// MinEntropyBytes and at most MaxEntropyBytes; it is mixed into the
	// kernel's pool and credited (RNDADDENTROPY), so a guest restored from
	// a snapshot does not repeat its twin's random numbers.
	Entropy []byte `json:"entropy,omitempty"`
	// TimeUnixNano, if > 0, sets the guest's CLOCK_REALTIME: a restored
	// snapshot wakes with the snapshot's clock.
	TimeUnixNano int64 `json:"time_unix_nano,omitempty"`
	// Network, if set, configures one interface.
	Network *GuestNetwork `json:"network,omitempty"`
	// PidsMax, if > 0, becomes pids.max of the cgroup every process the
	// agent starts runs in (the agent must have one: --pids-max).
	PidsMax int64 `json:"pids_max,omitempty"`
}

// GuestNetwork configures the guest's network interface: the link is
// brought up with the address, a default route via Gateway is added, and
// /etc/resolv.conf lists DNS. The loopback interface is brought up too.
type GuestNetwork struct {
	Interface string   `json:"interface,omitempty"` // default "eth0"
	Address   string   `json:"address"`             // CIDR prefix, e.g. "10.0.0.2/30"
	Gateway   string   `json:"gateway,omitempty"`   // e.g. "10.0.0.1"; none: no default route
	DNS       []string `json:"dns,omitempty"`       // name server addresses; none: resolv.conf untouched
}

// DefaultGuestInterface is GuestNetwork.Interface's default.
const DefaultGuestInterface = "eth0"
