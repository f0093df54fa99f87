// Command capprobe stands in for lev in the jail's hardening tests: it reports, from inside
// the container, the capabilities, no_new_privs, identity and mounts it runs with, and
// attacks the hardening (mount, chown to root, write outside its mounts), printing one
// line per outcome.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	f, err := os.Open("/proc/self/status")
	if err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			l := s.Text()
			if strings.HasPrefix(l, "Cap") || strings.HasPrefix(l, "NoNewPrivs") || strings.HasPrefix(l, "Uid") {
				fmt.Println("status", strings.Join(strings.Fields(l), " "))
			}
		}
		f.Close()
	}
	fmt.Println("uid", os.Getuid())
	report("mount", syscall.Mount("tmpfs", "/tmp", "tmpfs", 0, ""))
	report("setuid0", syscall.Setuid(0))
	report("write-root", os.WriteFile("/evil", []byte("x"), 0o644))
	for _, a := range os.Args[1:] {
		// "ls:<dir>" lists a directory, "read:<file>" reads one, "write:<file>" writes one.
		kind, p, _ := strings.Cut(a, ":")
		switch kind {
		case "ls":
			ents, err := os.ReadDir(p)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			fmt.Printf("ls %s [%s] %s\n", p, strings.Join(names, ","), errs(err))
		case "read":
			b, err := os.ReadFile(p)
			fmt.Printf("read %s %q %s\n", p, strings.TrimSpace(string(b)), errs(err))
		case "write":
			report("write "+p, os.WriteFile(p, []byte("w"), 0o644))
		case "env":
			fmt.Println("env", strings.Join(os.Environ(), " "))
		case "find":
			// "find:<needle>" searches every readable file under / (but /proc and /sys,
			// which hold this process's own arguments) for the needle's bytes.
			fmt.Printf("find %s\n", strings.Join(find([]byte(p)), ","))
		}
	}
}

func report(what string, err error) { fmt.Println(what, errs(err)) }

func errs(err error) string {
	if err == nil {
		return "ok"
	}
	return "refused(" + err.Error() + ")"
}

// find lists the regular files under / that contain needle; "hits=N" comes first.
func find(needle []byte) []string {
	var hits []string
	filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (p == "/proc" || p == "/sys" || p == "/dev") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, needle) {
			hits = append(hits, p)
		}
		return nil
	})
	return append([]string{fmt.Sprintf("hits=%d", len(hits))}, hits...)
}
