// Package probes is the guest side of lever acceptance: it runs inside the guest (as
// root, in the jail's network namespace, started as `lev __guest probe`) and measures what
// the host then judges: network probes, lev containers' processes, and a search for the
// API key. The host side (internal/acceptance) only builds the Request and reads the
// Response; nothing here links the podman bindings, so lev can carry it.
package probes

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Request is everything the guest side measures, in one round-trip.
type Request struct {
	Probes []Probe `json:"probes"`
	// Pids are lev containers' processes (pids in the guest) to inspect.
	Pids []int `json:"pids"`
	Scan *Scan `json:"scan,omitempty"`
}

// Scan looks for a secret without the secret entering the guest: the host sends a
// Rabin-Karp fingerprint of it (a random base and the rolling hash of the whole value,
// modulo 2^64) and its SHA-256; the guest rolls that hash over every byte window of the
// secret's length and confirms each candidate by SHA-256. A 64-bit linear fingerprint and a
// digest of a high-entropy key do not give the key away.
type Scan struct {
	Len    int      `json:"len"`
	Base   uint64   `json:"base"`
	Target uint64   `json:"target"`
	SHA256 string   `json:"sha256"`
	Roots  []string `json:"roots"`   // directories searched (e.g. /proc/<pid>/root, or /)
	Prune  []string `json:"prune"`   // absolute paths not descended into
	Files  []string `json:"files"`   // single files (e.g. /proc/<pid>/environ)
	MaxMiB int      `json:"max_mib"` // files larger than this are skipped and counted
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
	Hits     []string `json:"hits"`
	Scanned  int      `json:"scanned_files"`
	Skipped  int      `json:"skipped_files"`
}

// Serve runs in the guest (as root, in the jail's network namespace): it reads a Request
// on r and writes a Response on w.
func Serve(r io.Reader, w io.Writer) error {
	var req Request
	if err := json.NewDecoder(r).Decode(&req); err != nil {
		return fmt.Errorf("reading the acceptance request: %w", err)
	}
	resp := Response{Outcomes: RunProbes(req.Probes)}
	self, _ := os.Readlink("/proc/self/ns/net")
	for _, pid := range req.Pids {
		resp.Procs = append(resp.Procs, inspectProc(pid, self))
	}
	if req.Scan != nil {
		resp.Hits, resp.Scanned, resp.Skipped = scan(*req.Scan)
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

// Fingerprint computes a Scan's identifying fields from the secret, on the host.
func Fingerprint(secret []byte, base uint64) (target uint64, digest string) {
	for _, b := range secret {
		target = target*base + uint64(b)
	}
	s := sha256.Sum256(secret)
	return target, fmt.Sprintf("%x", s)
}

func scan(s Scan) (hits []string, scanned, skipped int) {
	if s.Len <= 0 {
		return nil, 0, 0
	}
	var pow uint64 = 1 // base^(len-1)
	for i := 1; i < s.Len; i++ {
		pow *= s.Base
	}
	max := int64(s.MaxMiB) << 20
	if max <= 0 {
		max = 64 << 20
	}
	prune := map[string]bool{}
	for _, p := range s.Prune {
		prune[filepath.Clean(p)] = true
	}
	check := func(path string) {
		f, err := os.Open(path)
		if err != nil {
			return
		}
		defer f.Close()
		scanned++
		if found(bufio.NewReaderSize(f, 1<<16), s, pow) {
			hits = append(hits, path)
		}
	}
	for _, f := range s.Files {
		check(f)
	}
	for _, root := range s.Roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				if prune[filepath.Clean(p)] {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if info, err := d.Info(); err == nil && info.Size() > max {
				skipped++
				return nil
			}
			check(p)
			return nil
		})
	}
	return hits, scanned, skipped
}

func found(r *bufio.Reader, s Scan, pow uint64) bool {
	L := uint64(s.Len)
	ring := make([]byte, s.Len)
	win := make([]byte, s.Len)
	buf := make([]byte, 1<<16)
	var h, n uint64
	slot := 0 // ring index of the oldest byte, where the next one goes
	for {
		m, err := r.Read(buf)
		for _, b := range buf[:m] {
			if n >= L {
				h -= uint64(ring[slot]) * pow
			}
			h = h*s.Base + uint64(b)
			ring[slot] = b
			if slot++; slot == s.Len {
				slot = 0
			}
			n++
			if h == s.Target && n >= L {
				// the window, oldest byte first, starts at slot
				copy(win, ring[slot:])
				copy(win[s.Len-slot:], ring[:slot])
				if fmt.Sprintf("%x", sha256.Sum256(win)) == s.SHA256 {
					return true
				}
			}
		}
		if err != nil {
			return false
		}
	}
}
