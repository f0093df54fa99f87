package probes

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
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
	Found []Hit
	Files int
	Bytes int64 // data read: a sparse file's holes are not read, nor counted
	// Skipped: files holding more data than Scan.MaxMiB, left unread.
	Skipped int
	// Changed: files (walked, or in Scan.Files) that were gone, could not be opened or
	// read, or were no longer a regular file when a reader came to them: not read. A live
	// guest deletes files all the time; a path an agent swapped for a FIFO, a device or a
	// symlink in that window lands here too, instead of hanging the search or steering it.
	Changed       int
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

// beforeOpen, when set (only by tests), runs in a reader between the walk listing a path
// and the reader opening it: the window in which an agent can unlink, rename or swap it.
var beforeOpen func(path string)

// lseek finds a file's data extents; a variable so that a test can stand in a filesystem
// without SEEK_DATA.
var lseek = unix.Seek

// devIno names an inode: what is read once however many paths reach it.
type devIno struct{ dev, ino uint64 }

// Search reads every file the Scan names, in parallel (one reader per CPU), and reports
// where a spelling of the secret was found.
//
// The walk only lists paths; a reader opens each later, so whatever the walk saw may have
// changed by then. Nothing the walk saw is trusted: the reader opens the path without
// following a symlink or blocking (a FIFO's open would wait for a writer forever) and
// judges the open file itself (fstat): only a regular file is read, anything else is
// counted in Changed. A file reached at several paths (hard links, a tree mounted in every
// container, a bind mount seen from the guest and from a container) is read once, by the
// first reader that holds it open, and reported under every path: deduplicating when the
// walk sees a path would let an agent that unlinks that one path before it is opened hide
// every other link to the same inode.
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
	limit := int64(s.MaxMiB) << 20
	if limit <= 0 {
		limit = 256 << 20
	}
	// walked: a file the walk listed, whose inode is read once under all its paths. The
	// environment and command line of processes are not: procfs may reuse inode numbers.
	// proc: one of those, which a kernel thread (no environment) or a process that has
	// exited fails to open or read: that is not a changed file, and is not counted.
	type item struct {
		path, where  string
		walked, proc bool
	}
	items := make(chan item, 256)
	var mu sync.Mutex
	// claimed: inodes a reader has open (and so will read whatever happens to their
	// paths); aliases: their other paths; hit: the spelling found in each.
	claimed := map[devIno]bool{}
	aliases := map[devIno][]string{}
	hit := map[devIno]string{}
	var wg sync.WaitGroup
	for w := 0; w < max(runtime.NumCPU(), 2); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &matcher{pats: s.Patterns, digests: digests, maxLen: maxLen, buf: make([]byte, chunk+maxLen)}
			for it := range items {
				if beforeOpen != nil {
					beforeOpen(it.path)
				}
				f, fst, err := openRegular(it.path)
				if err != nil {
					// Nothing claimed: another path to the same inode is still read.
					if !it.proc {
						mu.Lock()
						st.Changed++
						mu.Unlock()
					}
					continue
				}
				k := devIno{uint64(fst.Dev), uint64(fst.Ino)}
				if it.walked {
					mu.Lock()
					if claimed[k] {
						aliases[k] = append(aliases[k], it.where)
						mu.Unlock()
						f.Close()
						continue
					}
					claimed[k] = true
					mu.Unlock()
				}
				r := m.file(f, fst.Size, fst.Blocks, limit)
				f.Close()
				mu.Lock()
				switch {
				case r.spelling != "":
					st.Files++
					st.Bytes += r.n
					st.Found = append(st.Found, Hit{Where: it.where, Spelling: r.spelling})
					if it.walked {
						hit[k] = r.spelling
					}
				case r.err != nil:
					// Unread: a path to the same inode that comes later is read instead
					// (the paths recorded as its aliases meanwhile are reported if it
					// holds the key).
					if !it.proc {
						st.Changed++
					}
					if it.walked {
						delete(claimed, k)
					}
				case r.over:
					st.Skipped++
				default:
					st.Files++
					st.Bytes += r.n
				}
				mu.Unlock()
			}
		}()
	}
	for _, f := range s.Files {
		items <- item{f, f, false, false}
	}
	for _, pid := range procsToSearch(s) {
		p := "/proc/" + strconv.Itoa(pid)
		items <- item{p + "/environ", "environment of pid " + strconv.Itoa(pid), false, true}
		items <- item{p + "/cmdline", "command line of pid " + strconv.Itoa(pid), false, true}
	}
	prune := map[string]bool{}
	for _, p := range s.Prune {
		prune[filepath.Clean(p)] = true
	}
	// nonRoot: for each directory inside a RootOnly tree, whether a non-root user could
	// have written below it (it or a directory above it, up to the tree's top, is owned
	// by one or group/world-writable). A directory absent here is not in such a tree.
	nonRoot := map[string]bool{}
	rootOnly := map[string]bool{}
	for _, p := range s.RootOnly {
		rootOnly[filepath.Clean(p)] = true
	}
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
			// Only a RootOnly tree needs the file's owner and mode here; everything
			// else about the file is judged by the reader on the file it opens.
			if dirOpen, inTree := nonRoot[filepath.Dir(filepath.Clean(p))]; inTree && !dirOpen {
				info, err := d.Info()
				if err != nil {
					return nil
				}
				if !nonRootWritable(info) {
					mu.Lock()
					st.RootOnlyFiles++
					st.RootOnlyBytes += info.Size()
					mu.Unlock()
					return nil
				}
			}
			items <- item{p, p, true, false}
			return nil
		})
	}
	close(items)
	wg.Wait()
	for k, sp := range hit {
		for _, a := range aliases[k] {
			st.Found = append(st.Found, Hit{Where: a, Spelling: sp})
		}
	}
	sort.Slice(st.Found, func(i, j int) bool { return st.Found[i].Where < st.Found[j].Where })
	return st
}

// nonRootWritable: a user other than root owns it, or its mode lets group or others write.
// What cannot be told (no stat data) counts as writable: the file is then read.
func nonRootWritable(info fs.FileInfo) bool {
	sys, ok := info.Sys().(*syscall.Stat_t)
	return !ok || sys.Uid != 0 || info.Mode().Perm()&0o022 != 0
}
