package probes

// Which processes a Scan searches: all, or the given ones and their descendants, and the
// run user's containers found from /proc. (Split from scan.go; unchanged.)

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
)

// procsToSearch is every pid whose environment and command line are searched: all of
// them, or the given ones and their descendants.
func procsToSearch(s Scan) []int {
	if !s.AllProcs && len(s.ProcsOf) == 0 {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	var all []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		all = append(all, pid)
		parent[pid] = ppid(pid)
	}
	if s.AllProcs {
		return all
	}
	want := map[int]bool{}
	for _, p := range s.ProcsOf {
		want[p] = true
	}
	var out []int
	for _, pid := range all {
		for p, hops := pid, 0; p > 0 && hops < 64; p, hops = parent[p], hops+1 {
			if want[p] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// ppid reads a process's parent from /proc/<pid>/stat (after the command's closing
// parenthesis, which the command itself cannot forge past: it is the last one).
func ppid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// findContainers finds the first process of every container whose conmon runs as the
// user runUser (uid returned, -1 when unknown) with a container name (conmon's -n) that
// starts with prefix: conmon is the parent of the container's first process.
func findContainers(runUser, prefix string) (uid int, pids []int, err error) {
	uid = -1
	u, err := user.Lookup(runUser)
	if err != nil {
		return -1, nil, fmt.Errorf("run user %q: %w", runUser, err)
	}
	if uid, err = strconv.Atoi(u.Uid); err != nil {
		return -1, nil, fmt.Errorf("run user %q has uid %q", runUser, u.Uid)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return uid, nil, err
	}
	// conmons: the containers' conmons; anyConmon: every process named conmon
	conmons, anyConmon := map[int]bool{}, map[int]bool{}
	var all []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		all = append(all, pid)
		base := "/proc/" + e.Name()
		if comm, _ := os.ReadFile(base + "/comm"); strings.TrimSpace(string(comm)) != "conmon" {
			continue
		}
		anyConmon[pid] = true
		if procUID(pid) != uid {
			continue
		}
		cmd, _ := os.ReadFile(base + "/cmdline")
		args := strings.Split(string(cmd), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if (args[i] == "-n" || args[i] == "--name") && strings.HasPrefix(args[i+1], prefix) {
				conmons[pid] = true
			}
		}
	}
	for _, pid := range all {
		if !conmons[ppid(pid)] {
			continue
		}
		// An exec session's conmon (lever run, lever shell) forks a second conmon, which
		// lingers for minutes after the exec ends: it is no container process. Its view
		// is podman's mount namespace, whose /run/user/<uid> holds every container's
		// mounted root; taken for a container, it had the search read the workbench tree
		// again through it (158 MiB more on a VM under TCG, a 31-44 s acceptance).
		if anyConmon[pid] {
			continue
		}
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return uid, pids, nil
}

// procUID is a process's real uid, or -1.
func procUID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, err := strconv.Atoi(f[0])
				if err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// memoryMounts lists a process's tmpfs and ramfs mounts as paths through its root.
func memoryMounts(pid int) []string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	root := "/proc/" + strconv.Itoa(pid) + "/root"
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint options [optional...] - fstype source super
		l := sc.Text()
		pre, post, ok := strings.Cut(l, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 || (qf[0] != "tmpfs" && qf[0] != "ramfs") {
			continue
		}
		mp := unescapeMount(pf[4])
		// Device nodes and kernel views hold no files of the agent's; /dev/shm may.
		if mp == "/dev" || (strings.HasPrefix(mp, "/dev/") && mp != "/dev/shm") || strings.HasPrefix(mp, "/sys") || strings.HasPrefix(mp, "/proc") {
			continue
		}
		out = append(out, root+mp+"/")
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
