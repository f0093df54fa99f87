package acceptance

import "github.com/lever-jail/lever/internal/guestside/probes"

// The guest side's wire types live in internal/guestside/probes (lev serves them in the
// guest); acceptance builds the Request and judges the Response under these names.
type (
	Probe    = probes.Probe
	Outcome  = probes.Outcome
	ProcInfo = probes.ProcInfo
	Request  = probes.Request
	Response = probes.Response
	Scan     = probes.Scan
)
