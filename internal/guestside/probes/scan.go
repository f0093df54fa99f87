package probes

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Scan is a search of the guest for a secret that does not send the secret there. For
// each spelling of it (Pattern) the host sends its length, its first few bytes (the
// anchor) and its SHA-256; the guest finds the anchor with a native fixed-string search
// (bytes.Index: SIMD on amd64 and arm64) and confirms each candidate window by SHA-256. A
// provider key's first bytes are its public prefix ("sk-ant-", "sk-proj-"), so for the
// keys lever brokers the anchors give nothing away; for any key at most 4 bytes of each
// spelling's beginning leave the host.
type Scan struct {
	Patterns []Pattern `json:"patterns"`
	Roots    []string  `json:"roots"` // directories searched (e.g. /proc/<pid>/root/, or /)
	Prune    []string  `json:"prune"` // absolute paths not descended into
	// RootOnly are package-managed trees (/usr/lib, /boot, dpkg's and apt's state) that
	// only root writes. In them a file is read only when a non-root user could have put
	// it there: it, or a directory on its way down from the tree's top, is owned by a
	// non-root user or group/world-writable. The rest are counted, not read: no agent, run
	// user or lever step that could hold the key writes them (lever's root steps never
	// have it), and they are most of a guest's bytes.
	RootOnly []string `json:"root_only,omitempty"`
	Files    []string `json:"files"` // single files
	// ProcsOf: these processes (lev containers' first processes) and all their
	// descendants have their environment and command line searched.
	ProcsOf []int `json:"procs_of,omitempty"`
	// AllProcs: every process's environment and command line (a VM guest: no process
	// there may hold the key).
	AllProcs bool `json:"all_procs,omitempty"`
	// TmpfsOf: the memory-backed mounts (tmpfs, ramfs) these processes see are searched
	// through /proc/<pid>/root. Everything else a container sees lives on the guest's own
	// filesystems, which a whole-guest root already covers; its private tmpfs exists only
	// in its view.
	TmpfsOf []int `json:"tmpfs_of,omitempty"`
	MaxMiB  int   `json:"max_mib"` // larger files are skipped and counted
	// Views says how the containers Request.NamePrefix finds are searched: "whole" walks
	// each one's entire view (/proc/<pid>/root) and its processes' environment and
	// command line (the netns substrate, where the guest is the host and a whole-guest
	// search would find the key file itself); "memory" only the memory-backed mounts in
	// it (a VM, searched whole besides, with AllProcs).
	Views string `json:"views,omitempty"`
}

// withContainers adds the found containers' pids to the search, as Views asks.
func (s Scan) withContainers(pids []int) Scan {
	switch s.Views {
	case "whole":
		for _, pid := range pids {
			root := "/proc/" + strconv.Itoa(pid) + "/root"
			// The trailing slash makes the walk follow the magic link into the
			// container's view instead of stopping at the link itself.
			s.Roots = append(s.Roots, root+"/")
			s.Prune = append(s.Prune, root+"/proc", root+"/sys", root+"/dev")
			s.ProcsOf = append(s.ProcsOf, pid)
		}
	case "memory":
		s.TmpfsOf = append(s.TmpfsOf, pids...)
	}
	return s
}

// Pattern is one spelling of the secret.
type Pattern struct {
	Spelling string `json:"spelling"` // "raw", "base64 from byte 1", ...
	Len      int    `json:"len"`
	Anchor   []byte `json:"anchor"`
	SHA256   string `json:"sha256"`
}

// Hit is a place the secret was found, and in which spelling.
type Hit struct {
	Where    string `json:"where"`
	Spelling string `json:"spelling"`
}

// Stats is what a Search found and read. RootOnlyFiles and RootOnlyBytes are the files
// in Scan.RootOnly trees left unread because only root could have written them.
type Stats struct {
	Found         []Hit
	Files         int
	Bytes         int64
	Skipped       int
	RootOnlyFiles int
	RootOnlyBytes int64
}

// Patterns derives the spellings to look for from the secret, on the host: the raw bytes,
// and its base64 in the standard and URL alphabets at each of the three alignments the
// key can have in the encoded stream (only whole 3-byte groups of the key, whose encoding
// does not depend on the bytes around it).
func Patterns(secret []byte) []Pattern {
	var out []Pattern
	seen := map[string]bool{}
	add := func(spelling string, p []byte) {
		if len(p) == 0 || seen[string(p)] {
			return
		}
		seen[string(p)] = true
		n := min(max(len(p)/4, 1), 4)
		d := sha256.Sum256(p)
		out = append(out, Pattern{Spelling: spelling, Len: len(p), Anchor: append([]byte(nil), p[:n]...), SHA256: hex.EncodeToString(d[:])})
	}
	add("raw", secret)
	for _, enc := range []struct {
		name string
		e    *base64.Encoding
	}{{"base64", base64.StdEncoding}, {"base64url", base64.URLEncoding}} {
		for s := 0; s < 3; s++ {
			m := (len(secret) - s) / 3 * 3
			if m < 6 {
				continue
			}
			add(enc.name+" from byte "+strconv.Itoa(s), []byte(enc.e.EncodeToString(secret[s:s+m])))
		}
	}
	return out
}

// chunk is how much of a file one read takes.
const chunk = 1 << 20

// Search reads every file the Scan names, in parallel (one reader per CPU), and reports
// where a spelling of the secret was found.
func Search(s Scan) Stats {
	var st Stats
	if len(s.Patterns) == 0 {
		return st
	}
	maxLen := 0
	digests := make([][32]byte, len(s.Patterns))
	for i, p := range s.Patterns {
		maxLen = max(maxLen, p.Len)
		hex.Decode(digests[i][:], []byte(p.SHA256))
	}
	type item struct{ path, where string }
	items := make(chan item, 256)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < max(runtime.NumCPU(), 2); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &matcher{pats: s.Patterns, digests: digests, maxLen: maxLen, buf: make([]byte, chunk+maxLen)}
			for it := range items {
				spelling, n, ok := m.file(it.path)
				mu.Lock()
				if ok {
					st.Files++
					st.Bytes += n
				}
				if spelling != "" {
					st.Found = append(st.Found, Hit{Where: it.where, Spelling: spelling})
				}
				mu.Unlock()
			}
		}()
	}
	for _, f := range s.Files {
		items <- item{f, f}
	}
	for _, pid := range procsToSearch(s) {
		p := "/proc/" + strconv.Itoa(pid)
		items <- item{p + "/environ", "environment of pid " + strconv.Itoa(pid)}
		items <- item{p + "/cmdline", "command line of pid " + strconv.Itoa(pid)}
	}
	limit := int64(s.MaxMiB) << 20
	if limit <= 0 {
		limit = 256 << 20
	}
	prune := map[string]bool{}
	for _, p := range s.Prune {
		prune[filepath.Clean(p)] = true
	}
	// A file reached twice (the tree mounted in every container, a bind mount seen from
	// the guest and from a container) is read once and reported under every path.
	type devIno struct{ dev, ino uint64 }
	first := map[devIno]string{}
	// nonRoot: for each directory inside a RootOnly tree, whether a non-root user could
	// have written below it (it or a directory above it, up to the tree's top, is owned
	// by one or group/world-writable). A directory absent here is not in such a tree.
	nonRoot := map[string]bool{}
	rootOnly := map[string]bool{}
	for _, p := range s.RootOnly {
		rootOnly[filepath.Clean(p)] = true
	}
	aliases := map[string][]string{}
	roots := append([]string(nil), s.Roots...)
	for _, pid := range s.TmpfsOf {
		roots = append(roots, memoryMounts(pid)...)
	}
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				c := filepath.Clean(p)
				if prune[c] {
					return filepath.SkipDir
				}
				above, inTree := nonRoot[filepath.Dir(c)]
				if rootOnly[c] || inTree {
					info, err := d.Info()
					nonRoot[c] = above || err != nil || nonRootWritable(info)
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			if dirOpen, inTree := nonRoot[filepath.Dir(filepath.Clean(p))]; inTree && !dirOpen && !nonRootWritable(info) {
				mu.Lock()
				st.RootOnlyFiles++
				st.RootOnlyBytes += info.Size()
				mu.Unlock()
				return nil
			}
			if sys, ok := info.Sys().(*syscall.Stat_t); ok {
				k := devIno{uint64(sys.Dev), uint64(sys.Ino)}
				if f, ok := first[k]; ok {
					aliases[f] = append(aliases[f], p)
					return nil
				}
				first[k] = p
			}
			if info.Size() > limit {
				mu.Lock()
				st.Skipped++
				mu.Unlock()
				return nil
			}
			items <- item{p, p}
			return nil
		})
	}
	close(items)
	wg.Wait()
	for _, h := range st.Found {
		for _, a := range aliases[h.Where] {
			st.Found = append(st.Found, Hit{Where: a, Spelling: h.Spelling})
		}
	}
	sort.Slice(st.Found, func(i, j int) bool { return st.Found[i].Where < st.Found[j].Where })
	return st
}

type matcher struct {
	pats    []Pattern
	digests [][32]byte
	maxLen  int
	buf     []byte
}

// file searches one file chunk by chunk, carrying the last maxLen-1 bytes into the next
// chunk so that a spelling across a chunk boundary is found. ok is false when the file
// could not be opened.
func (m *matcher) file(path string) (spelling string, n int64, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, false
	}
	defer f.Close()
	keep := 0
	for {
		r, err := io.ReadFull(f, m.buf[keep:])
		n += int64(r)
		data := m.buf[:keep+r]
		if sp := m.search(data); sp != "" {
			return sp, n, true
		}
		if err != nil {
			return "", n, true
		}
		keep = min(m.maxLen-1, len(data))
		copy(m.buf, data[len(data)-keep:])
	}
}

// search finds each pattern's anchor and confirms the window by its digest. A window
// that runs past the end of data starts in the carried tail and is judged next chunk.
func (m *matcher) search(data []byte) string {
	for i, p := range m.pats {
		for off := 0; ; {
			j := bytes.Index(data[off:], p.Anchor)
			if j < 0 {
				break
			}
			pos := off + j
			if pos+p.Len > len(data) {
				break
			}
			if sha256.Sum256(data[pos:pos+p.Len]) == m.digests[i] {
				return p.Spelling
			}
			off = pos + 1
		}
	}
	return ""
}

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
	conmons := map[int]bool{}
	var all []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		all = append(all, pid)
		base := "/proc/" + e.Name()
		if comm, _ := os.ReadFile(base + "/comm"); strings.TrimSpace(string(comm)) != "conmon" || procUID(pid) != uid {
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
		if conmons[ppid(pid)] {
			pids = append(pids, pid)
		}
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

// nonRootWritable: a user other than root owns it, or its mode lets group or others write.
// What cannot be told (no stat data) counts as writable: the file is then read.
func nonRootWritable(info fs.FileInfo) bool {
	sys, ok := info.Sys().(*syscall.Stat_t)
	return !ok || sys.Uid != 0 || info.Mode().Perm()&0o022 != 0
}
