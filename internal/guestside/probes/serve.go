// Package probes is the guest side of lever acceptance: it runs inside the guest (as
// root, in the jail's network namespace, started as `lev __guest probe`) and measures what
// the host then judges: network probes, lev containers' processes, and a search for the
// API key. The host side (internal/acceptance) only builds the Request and reads the
// Response; nothing here links the podman bindings, so lev can carry it. It measures only:
// it must not judge (the host does) nor change the guest.
package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/guest"
)

// Request is everything the guest side measures, in one round-trip.
type Request struct {
	Probes []Probe `json:"probes"`
	// Pids are processes (pids in the guest) to inspect.
	Pids []int `json:"pids"`
	// NamePrefix finds lev's containers here, in the guest, so the host needs no guest call
	// before this one to learn their pids: the first process of each container whose
	// conmon runs as RunUser with a name starting with NamePrefix is inspected (and, per
	// Scan.Views, searched). The host later matches them to podman's list by pid; a
	// container podman lists that was not found here fails the checks.
	RunUser    string `json:"run_user,omitempty"`
	NamePrefix string `json:"name_prefix,omitempty"`
	Scan       *Scan  `json:"scan,omitempty"`
	// Snapshot is the egress snapshot, run here first in the same call: probes whose host
	// is Alias4 or Alias6 are aimed at the alias it finds (Aim).
	Snapshot *guest.CarriedSnapshot `json:"snapshot,omitempty"`
}

// ProcInfo is one lev process as the guest kernel sees it.
type ProcInfo struct {
	Pid        int    `json:"pid"`
	Uid        string `json:"uid"` // real, effective, saved, fs as /proc/PID/status prints them
	CapEff     string `json:"cap_eff"`
	CapBnd     string `json:"cap_bnd"`
	NoNewPrivs string `json:"no_new_privs"`
	NetNS      string `json:"netns"`
	JailNetNS  string `json:"jail_netns"` // the namespace the probe itself runs in
	Cgroup     string `json:"cgroup_version"`
	PidsMax    string `json:"pids_max"`
	MemoryMax  string `json:"memory_max"`
	Err        string `json:"error,omitempty"`
}

// Response is the guest side's answer.
type Response struct {
	Outcomes []Outcome `json:"outcomes"`
	Procs    []ProcInfo
	// RunUID is RunUser's uid in the guest (-1: not looked up or unknown); FindErr why
	// containers could not be looked for.
	RunUID  int    `json:"run_uid"`
	FindErr string `json:"find_error,omitempty"`
	// Found is where the secret was found (empty: nowhere searched); Scanned and
	// ScannedBytes what was read, Skipped the files holding more data than the cap,
	// Changed the files gone or no longer regular when a reader came to them (Stats).
	Found        []Hit `json:"found"`
	Scanned      int   `json:"scanned_files"`
	ScannedBytes int64 `json:"scanned_bytes"`
	Skipped      int   `json:"skipped_files"`
	Changed      int   `json:"changed_files"`
	// RootOnlyFiles/RootOnlyBytes: files in Scan.RootOnly trees not read (root-written).
	RootOnlyFiles int   `json:"root_only_files,omitempty"`
	RootOnlyBytes int64 `json:"root_only_bytes,omitempty"`
	ScanMS        int64 `json:"scan_ms"`
	// Snapshot is what the carried snapshot printed; AliasV4 and AliasV6 the aliases read
	// from it, and Probed the probes as aimed and run (the host checks both).
	Snapshot *guest.CarriedAnswer `json:"snapshot,omitempty"`
	AliasV4  string               `json:"alias_v4,omitempty"`
	AliasV6  string               `json:"alias_v6,omitempty"`
	Probed   []Probe              `json:"probed"`
}

// Serve runs in the guest (as root, in the jail's network namespace): it reads a Request
// on r and writes a Response on w.
func Serve(r io.Reader, w io.Writer) error {
	var req Request
	if err := json.NewDecoder(r).Decode(&req); err != nil {
		return fmt.Errorf("reading the acceptance request: %w", err)
	}
	// The egress snapshot and the search for lev's containers and their inspection run
	// together; the probes, aimed at the alias the snapshot found, follow the snapshot; the
	// key search, which keeps every vCPU busy, starts after the probes: "no route to host
	// at once" is judged by its elapsed time, which a saturated TCG guest would stretch.
	resp := Response{RunUID: -1}
	pids := req.Pids
	self, _ := os.Readlink("/proc/self/ns/net")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if req.NamePrefix != "" {
			uid, found, err := findContainers(req.RunUser, req.NamePrefix)
			resp.RunUID = uid
			if err != nil {
				resp.FindErr = err.Error()
			}
			pids = append(pids, found...)
		}
		for _, pid := range pids {
			resp.Procs = append(resp.Procs, inspectProc(pid, self))
		}
	}()
	if req.Snapshot != nil {
		resp.Snapshot = runSnapshot(context.Background(), req.Snapshot)
		resp.AliasV4, resp.AliasV6 = req.Snapshot.Aliases(*resp.Snapshot)
	}
	resp.Probed = Aim(req.Probes, resp.AliasV4, resp.AliasV6)
	resp.Outcomes = RunProbes(resp.Probed)
	<-done
	if req.Scan != nil {
		start := time.Now()
		st := Search(req.Scan.withContainers(pids))
		resp.Found, resp.Scanned, resp.ScannedBytes, resp.Skipped, resp.Changed = st.Found, st.Files, st.Bytes, st.Skipped, st.Changed
		resp.RootOnlyFiles, resp.RootOnlyBytes = st.RootOnlyFiles, st.RootOnlyBytes
		resp.ScanMS = time.Since(start).Milliseconds()
	}
	return json.NewEncoder(w).Encode(resp)
}

func inspectProc(pid int, selfNS string) ProcInfo {
	pi := ProcInfo{Pid: pid, JailNetNS: selfNS}
	base := "/proc/" + strconv.Itoa(pid)
	st, err := os.ReadFile(base + "/status")
	if err != nil {
		pi.Err = err.Error()
		return pi
	}
	for _, l := range strings.Split(string(st), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.Join(strings.Fields(v), " ")
		switch k {
		case "Uid":
			pi.Uid = v
		case "CapEff":
			pi.CapEff = v
		case "CapBnd":
			pi.CapBnd = v
		case "NoNewPrivs":
			pi.NoNewPrivs = v
		}
	}
	pi.NetNS, _ = os.Readlink(base + "/ns/net")
	// The container's own view of its cgroup (a private cgroup namespace puts its cgroup
	// at the root): v2 has pids.max and memory.max there, v1 splits them by controller.
	root := base + "/root/sys/fs/cgroup"
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	if _, err := os.Stat(root + "/cgroup.controllers"); err == nil {
		pi.Cgroup = "v2"
		pi.PidsMax, pi.MemoryMax = read(root+"/pids.max"), read(root+"/memory.max")
		if pi.PidsMax == "" && pi.MemoryMax == "" {
			// The container sees a cgroup root with no limit files: its /sys is the guest's
			// (a container on the guest's own network cannot mount a sysfs of its own), so
			// its /sys/fs/cgroup is the whole hierarchy. Read its cgroup by the path the
			// kernel gives for it instead (this side runs in the guest's cgroup namespace).
			pi.PidsMax, pi.MemoryMax = v2Limits(read(base+"/cgroup"), read)
		}
	} else {
		pi.Cgroup = "v1"
		pi.PidsMax, pi.MemoryMax = read(root+"/pids/pids.max"), read(root+"/memory/memory.limit_in_bytes")
	}
	return pi
}

// v2Limits reads pids.max and memory.max of the cgroup named by a /proc/<pid>/cgroup "0::"
// line, under the guest's /sys/fs/cgroup.
func v2Limits(procCgroup string, read func(string) string) (pids, mem string) {
	for _, l := range strings.Split(procCgroup, "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok && !strings.Contains(p, "..") {
			dir := "/sys/fs/cgroup" + path.Clean("/"+p)
			return read(dir + "/pids.max"), read(dir + "/memory.max")
		}
	}
	return "", ""
}
