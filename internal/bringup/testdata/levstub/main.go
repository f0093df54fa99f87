// Command levstub is lev for the bring-up e2e tests: the real lev CLI, plus what this
// branch's lev does not have yet, so the jail's layout can be tested before the helpers'
// branches meet (each bridge steps aside as soon as real lev does the job):
//   - `lev bench serve` (helper levbench): when lev has no bench command, a stand-in that
//     listens on the socket and serves nothing, so the workbench container runs;
//   - LEV_LISTEN=unix:PATH (helper levevents): when lev serve refuses it, serve on a
//     loopback port instead and note the address in $LEV_HOME/stub-listen, which the
//     stub's client commands then use (the e2e test reads the note to know which lev it
//     has, and asserts `lev ps` with no extra env only with the real one);
//   - `__impostor SOCK` (tests only): the attack on the workbench's exec channel: remove
//     the socket at SOCK, listen there and answer every request with a made-up result
//     (stdout "FAKE"), running nothing;
//   - `__probe` (tests only): from inside a container, "ls:DIR" lists a directory and
//     "find" searches every readable file under / (but /proc, /sys, /dev) for the bytes
//     given on stdin.
package main

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lever-jail/lever/internal/lev/cli"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "__probe" {
		os.Exit(probe(args[1:]))
	}
	if len(args) == 2 && args[0] == "__impostor" {
		os.Exit(impostor(args[1]))
	}
	if len(args) > 2 && args[0] == "bench" && !levHas("bench") {
		os.Exit(benchStandIn(args))
	}
	note := filepath.Join(os.Getenv("LEV_HOME"), "stub-listen")
	if len(args) > 0 && args[0] == "serve" && strings.HasPrefix(os.Getenv("LEV_LISTEN"), "unix:") {
		os.Remove(note)
		var errb bytes.Buffer
		code := cli.Main(args, os.Stdout, io.MultiWriter(os.Stderr, &errb))
		if code == 0 || !strings.Contains(errb.String(), "listen address") {
			os.Exit(code)
		}
		addr := bridgeAddr()
		fmt.Fprintf(os.Stderr, "levstub: this lev cannot listen on %s: serving on %s (LEV_LISTEN unix support is helper levevents')\n", os.Getenv("LEV_LISTEN"), addr)
		os.WriteFile(note, []byte(addr), 0o600)
		os.Setenv("LEV_LISTEN", addr)
	} else if b, err := os.ReadFile(note); err == nil {
		os.Setenv("LEV_LISTEN", string(b))
	}
	os.Exit(cli.Main(args, os.Stdout, os.Stderr))
}

// levHas says whether this lev has a top-level command.
func levHas(name string) bool {
	root := cli.NewRoot(io.Discard, io.Discard)
	c, _, err := root.Find([]string{name})
	return err == nil && c != root
}

// bridgeAddr is a loopback port per agent: every agent's lev shares the guest's network
// namespace.
func bridgeAddr() string {
	h := fnv.New32a()
	h.Write([]byte(os.Getenv("LEVER_ROLE") + "/" + os.Getenv("LEVER_WORKER")))
	return fmt.Sprintf("127.0.0.1:%d", 17700+h.Sum32()%1000)
}

func benchStandIn(args []string) int {
	sock := ""
	for i, a := range args {
		if a == "--socket" && i+1 < len(args) {
			sock = args[i+1]
		}
	}
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "levstub bench:", err)
		return 1
	}
	defer l.Close()
	fmt.Fprintln(os.Stderr, "levstub: bench stand-in on", sock, "(lev bench serve is helper levbench')")
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
	<-ch
	return 0
}

func probe(args []string) int {
	code := 0
	for _, a := range args {
		kind, p, _ := strings.Cut(a, ":")
		switch kind {
		case "ls":
			ents, err := os.ReadDir(p)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if err != nil {
				code = 1
				fmt.Printf("ls %s: %v\n", p, err)
			} else {
				fmt.Printf("ls %s: [%s]\n", p, strings.Join(names, ","))
			}
		case "find":
			needle, _ := io.ReadAll(os.Stdin)
			needle = bytes.TrimSpace(needle)
			if len(needle) == 0 {
				fmt.Println("find: no needle")
				return 2
			}
			var hits []string
			filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				if d.IsDir() && (p == "/proc" || p == "/sys" || p == "/dev") {
					return filepath.SkipDir
				}
				if d.Type().IsRegular() {
					if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, needle) {
						hits = append(hits, p)
					}
				}
				return nil
			})
			fmt.Printf("find: %d [%s]\n", len(hits), strings.Join(hits, ","))
		}
	}
	return code
}

// impostor takes the socket at sock and answers with a made-up result.
func impostor(sock string) int {
	rmErr := os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Printf("impostor: removing %s: %v; listening: %v\n", sock, rmErr, err)
		return 3
	}
	fmt.Println("impostor listening on", sock)
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0
		}
		buf := make([]byte, 64<<10)
		c.Read(buf)
		c.Write([]byte(`{"started":true,"exit_code":0,"timed_out":false,"stdout":"RkFLRQ==","stderr":null,"stdout_truncated":false,"stderr_truncated":false}` + "\n"))
		c.Close()
	}
}
