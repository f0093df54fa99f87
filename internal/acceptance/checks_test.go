package acceptance

import (
	"strings"
	"testing"
)

func good() (Expect, Measured) {
	e := Expect{AliasIP: "10.0.0.1", AllowPorts: []int{7443}, AdminPort: 7444, BrokerAddr: "10.0.0.1:7443",
		PidsLimit: 512, MemoryMax: 1 << 30, Targets: DefaultTargets(), Closed: true}
	m := Measured{
		EgressMatch: true,
		Outcomes: map[string]Outcome{
			"metadata":   {Result: "hostunreach", ElapsedMS: 0.3},
			"linklocal":  {Result: "timeout", ElapsedMS: 1500},
			"lan":        {Result: "timeout", ElapsedMS: 1500},
			"alias:7443": {Result: "connected"},
			"admin":      {Result: "timeout"},
			"broker-tls": {Result: "refused-no-client-cert", CertValid: true},
			"dns":        {Result: "timeout"},
			"internet":   {Result: "timeout"},
			"loopback":   {Result: "connected"},
		},
		Containers: []ContainerInfo{{Name: "lev", Running: true, Pid: 42}},
		Procs: []ProcInfo{{Pid: 42, Uid: "1001 1001 1001 1001", CapEff: "0000000000000000", CapBnd: "0000000000000000",
			NoNewPrivs: "1", NetNS: "net:[1]", JailNetNS: "net:[1]", Cgroup: "v2", PidsMax: "512", MemoryMax: "1073741824"}},
		Scanned: 10, WholeGuest: true,
	}
	return e, m
}

func statusOf(rs []Result, id string) (Status, string) {
	for _, r := range rs {
		if r.ID == id {
			return r.Status, r.Detail
		}
	}
	return "", ""
}

func TestEvaluateAllPass(t *testing.T) {
	e, m := good()
	for _, r := range Evaluate(e, m) {
		if r.Status != Pass {
			t.Errorf("%s: %s %s", r.ID, r.Status, r.Detail)
		}
	}
}

// TestEvaluateChangedFilesReported: files that vanished or stopped being regular between
// the search's walk and its read are named in the detail and do not fail the check (a
// live guest deletes files during any search; the search reads every other path to the
// same inode, and never follows what a path was swapped for).
func TestEvaluateChangedFilesReported(t *testing.T) {
	e, m := good()
	m.Changed = 3
	s, d := statusOf(Evaluate(e, m), "no-api-key")
	if s != Pass || !strings.Contains(d, "3 files gone or no longer regular files when read") {
		t.Fatalf("no-api-key: %s %q, want PASS naming the 3 changed files", s, d)
	}
}

// Each case breaks one property; exactly that check must fail, naming why.
func TestEvaluateEachAttackFailsItsCheck(t *testing.T) {
	cases := []struct {
		name, id, want string
		mod            func(*Expect, *Measured)
		status         Status
	}{
		{"rule tampered", "egress-chains", "-A LEVER_EGRESS", func(e *Expect, m *Measured) {
			m.EgressMatch, m.EgressDiff = false, []string{"ipv4: rule 3 changed: -A LEVER_EGRESS -d 10.0.0.0/8 -j ACCEPT"}
		}, Fail},
		{"metadata dropped not rejected", "metadata-reject", "timeout", func(e *Expect, m *Measured) {
			m.Outcomes["metadata"] = Outcome{Result: "timeout", ElapsedMS: 1500}
		}, Fail},
		{"metadata rejected slowly", "metadata-reject", "hostunreach", func(e *Expect, m *Measured) {
			m.Outcomes["metadata"] = Outcome{Result: "hostunreach", ElapsedMS: 1000}
		}, Fail},
		{"link-local neighbour rejected", "linklocal-drop", "want dropped", func(e *Expect, m *Measured) {
			m.Outcomes["linklocal"] = Outcome{Result: "hostunreach"}
		}, Fail},
		{"LAN reachable", "private-drop", "connected", func(e *Expect, m *Measured) {
			m.Outcomes["lan"] = Outcome{Result: "connected"}
		}, Fail},
		{"LAN with no route proves nothing", "private-drop", "not exercised", func(e *Expect, m *Measured) {
			m.Outcomes["lan"] = Outcome{Result: "netunreach"}
		}, Fail},
		{"alias port dropped", "alias-ports", "7443 timeout", func(e *Expect, m *Measured) {
			m.Outcomes["alias:7443"] = Outcome{Result: "timeout"}
		}, Fail},
		{"admin port reachable", "admin-port", "connected", func(e *Expect, m *Measured) {
			m.Outcomes["admin"] = Outcome{Result: "connected"}
		}, Fail},
		{"broker serves without client cert", "broker-tls", "served-without-client-cert", func(e *Expect, m *Measured) {
			m.Outcomes["broker-tls"] = Outcome{Result: "served-without-client-cert", CertValid: true}
		}, Fail},
		{"broker cert invalid for IP", "broker-tls", "cert-invalid", func(e *Expect, m *Measured) {
			m.Outcomes["broker-tls"] = Outcome{Result: "cert-invalid"}
		}, Fail},
		{"DNS answers in closed posture", "closed-dns", "answered", func(e *Expect, m *Measured) {
			m.Outcomes["dns"] = Outcome{Result: "answered"}
		}, Fail},
		{"internet reachable in closed posture", "closed-internet", "connected", func(e *Expect, m *Measured) {
			m.Outcomes["internet"] = Outcome{Result: "connected"}
		}, Fail},
		{"open posture: closed checks N/A", "closed-internet", "egress is open", func(e *Expect, m *Measured) {
			e.Closed = false
		}, NA},
		{"loopback broken", "loopback", "refused", func(e *Expect, m *Measured) {
			m.Outcomes["loopback"] = Outcome{Result: "refused"}
		}, Fail},
		{"lev has a capability", "containers-rootless", "CapEff 0000000000001000", func(e *Expect, m *Measured) {
			m.Procs[0].CapEff = "0000000000001000"
		}, Fail},
		{"lev runs as guest root", "containers-rootless", "rootful", func(e *Expect, m *Measured) {
			m.Procs[0].Uid = "0 0 0 0"
		}, Fail},
		{"lev without no_new_privs", "containers-rootless", "no_new_privs", func(e *Expect, m *Measured) {
			m.Procs[0].NoNewPrivs = "0"
		}, Fail},
		{"lev outside the jail's netns", "containers-rootless", "not the jail's", func(e *Expect, m *Measured) {
			m.Procs[0].NetNS = "net:[2]"
		}, Fail},
		{"neither namespace read: equal but unknown", "containers-rootless", "network namespace not read", func(e *Expect, m *Measured) {
			m.Procs[0].NetNS, m.Procs[0].JailNetNS = "", ""
		}, Fail},
		{"jail namespace not read", "containers-rootless", "network namespace not read", func(e *Expect, m *Measured) {
			m.Procs[0].JailNetNS = ""
		}, Fail},
		{"namespaces not in the kernel's form", "containers-rootless", "network namespace not read", func(e *Expect, m *Measured) {
			m.Procs[0].NetNS, m.Procs[0].JailNetNS = "x", "x"
		}, Fail},
		{"lev not running", "containers-rootless", "not running", func(e *Expect, m *Measured) {
			m.Containers[0].Running = false
		}, Fail},
		{"limits missing on a VM", "container-limits", "pids.max \"max\"", func(e *Expect, m *Measured) {
			m.Procs[0].PidsMax = "max"
		}, Fail},
		{"limits missing on cgroup v1, not dev substrate", "container-limits", "cgroup v1", func(e *Expect, m *Measured) {
			m.Procs[0].Cgroup, m.Procs[0].PidsMax, m.Procs[0].MemoryMax = "v1", "", ""
		}, Fail},
		{"dev substrate on cgroup v1: N/A, never PASS", "container-limits", LimitsNA, func(e *Expect, m *Measured) {
			e.DevSubstrate = true
			m.Procs[0].Cgroup, m.Procs[0].PidsMax, m.Procs[0].MemoryMax = "v1", "", ""
		}, NA},
		{"a file over the read cap is a failure, not a pass", "no-api-key", "1 files holding more data than the search's 256 MiB", func(e *Expect, m *Measured) {
			m.OverCap = 1
		}, Fail},
		{"key in a file", "no-api-key", "/proc/42/root/lever/leak.txt", func(e *Expect, m *Measured) {
			m.ScanHits = []string{"/proc/42/root/lever/leak.txt"}
		}, Fail},
		{"key in the environment", "no-api-key", "environment", func(e *Expect, m *Measured) {
			m.EnvHits = []string{"environment of pid 42"}
		}, Fail},
		{"key in the logs", "no-api-key", "logs of lev", func(e *Expect, m *Measured) {
			m.LogHits = []string{"logs of lev"}
		}, Fail},
		{"nothing scanned is no proof", "no-api-key", "nothing was scanned", func(e *Expect, m *Measured) {
			m.Scanned = 0
		}, Fail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, m := good()
			tc.mod(&e, &m)
			rs := Evaluate(e, m)
			s, d := statusOf(rs, tc.id)
			if s != tc.status || !strings.Contains(d, tc.want) {
				t.Fatalf("%s: %s %q, want %s containing %q", tc.id, s, d, tc.status, tc.want)
			}
			for _, r := range rs {
				if r.ID != tc.id && r.Status == Fail {
					t.Errorf("collateral failure %s: %s", r.ID, r.Detail)
				}
			}
		})
	}
}
