// Command benchtable runs every benchmark in the module and writes docs/benchmarks.md:
// one table per package and benchmark, custom metrics (b.ReportMetric) included, with
// the date and the machine. As root it adds -tags e2e so the benchmarks that need real
// namespaces, iptables or podman run too.
//
//	go run ./tools/benchtable -out docs/benchmarks.md
//
// It opens the document with the goals table (goals.go: each goal next to what was
// measured) and prints that table when done. -merge keeps the tables of benchmarks a run did
// not run (a subset given with -pkgs and -bench) from the existing document, marked with
// the run they come from.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

func main() {
	out := flag.String("out", "docs/benchmarks.md", "markdown file to write")
	benchtime := flag.String("benchtime", "", "passed to go test -benchtime (default: go test's)")
	pkgs := flag.String("pkgs", "./...", "packages to benchmark")
	bench := flag.String("bench", ".", "benchmark regexp")
	from := flag.String("from", "", "parse this saved `go test -bench` output instead of running")
	merge := flag.Bool("merge", false, "keep the tables of benchmarks this run did not run from the existing -out file (run a subset with -pkgs and -bench)")
	flag.Parse()

	var raw []byte
	var runErr error
	tags := ""
	if *from != "" {
		b, err := os.ReadFile(*from)
		if err != nil {
			fatal(err)
		}
		raw = b
	} else {
		// -p 1: one package's benchmarks at a time; two packages benchmarked at once (go
		// test's default on 2 cores) measured each other (a bring-up beside the broker's
		// handshakes made them 50x slower).
		args := []string{"test", "-p", "1", "-run", "^$", "-bench", *bench, "-benchmem", "-count", "1", "-timeout", "60m"}
		if os.Geteuid() == 0 {
			// A -tags flag replaces the one in GOFLAGS (the Makefile puts the podman
			// bindings' tags there), so carry those along.
			tags = MergeTags("e2e", os.Getenv("GOFLAGS"))
			args = append(args, "-tags", tags)
		}
		if *benchtime != "" {
			args = append(args, "-benchtime", *benchtime)
		}
		args = append(args, strings.Fields(*pkgs)...)
		fmt.Fprintf(os.Stderr, "benchtable: go %s\n", strings.Join(args, " "))
		cmd := exec.Command("go", args...)
		var buf bytes.Buffer
		cmd.Stdout = io.MultiWriter(&buf, os.Stderr)
		cmd.Stderr = os.Stderr
		runErr = cmd.Run()
		raw = buf.Bytes()
	}
	res := Parse(bytes.NewReader(raw))
	m := Machine()
	var old Doc
	if *merge {
		if b, err := os.ReadFile(*out); err == nil {
			old = ParseDoc(string(b))
		} else if !os.IsNotExist(err) {
			fatal(err)
		}
	}
	doc := Merge(old, res, m, time.Now().UTC(), tags)
	// Figures no Go benchmark can take here (a real VM's bring-up, minutes per sample) are
	// kept by hand in <out>-vm.md, written from the e2e tests' logs, and carried along so a
	// regeneration never drops them.
	vm := strings.TrimSuffix(*out, ".md") + "-vm.md"
	if extra, err := os.ReadFile(vm); err == nil {
		doc += "\n" + string(extra)
	}
	// the goals again, now with the VM document's figures
	doc = WithGoals(doc, RenderGoals(EvalGoals(Goals, goalInput(doc))))
	if err := os.WriteFile(*out, []byte(doc), 0o644); err != nil {
		fatal(err)
	}
	fmt.Fprintf(os.Stderr, "benchtable: wrote %s (%d benchmarks in %d packages)\n", *out, res.Count(), len(res.Packages))
	// The goals next to what was measured, on stdout (the benchmarks' own output went to
	// stderr as they ran).
	fmt.Print("\nGoals (docs/benchmarks.md opens with the same table):\n" + PrintGoals(EvalGoals(Goals, goalInput(doc))))
	if runErr != nil || len(res.Failed) > 0 {
		fmt.Fprintf(os.Stderr, "benchtable: some packages failed: %v %s\n", runErr, strings.Join(res.Failed, ", "))
		os.Exit(1)
	}
}

// goalInput is every row of the document just written, the kept ones included, and the
// VM document's figures.
func goalInput(doc string) map[string][]Bench {
	byPkg := map[string][]Bench{VMDoc: VMFigures(doc)}
	for _, s := range ParseDoc(doc).Sections {
		byPkg[s.Pkg] = s.Benches()
	}
	return byPkg
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchtable:", err)
	os.Exit(2)
}

// MachineInfo describes where the numbers were measured.
type MachineInfo struct {
	CPU, Kernel, OS, Go, Memory, Load string
	Cores                             int
}

// Machine reads the CPU model, core count, kernel, OS, memory and load average.
func Machine() MachineInfo {
	m := MachineInfo{Cores: runtime.NumCPU(), Go: goVersion()}
	m.CPU = fieldOf("/proc/cpuinfo", "model name", ":")
	m.Kernel = strings.TrimSpace(readFile("/proc/sys/kernel/osrelease"))
	m.OS = strings.Trim(fieldOf("/etc/os-release", "PRETTY_NAME", "="), `"`)
	m.Memory = memory(fieldOf("/proc/meminfo", "MemTotal", ":"))
	if f := strings.Fields(readFile("/proc/loadavg")); len(f) >= 3 {
		m.Load = strings.Join(f[:3], " ")
	}
	return m
}

func goVersion() string {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimSpace(string(out))
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func fieldOf(path, key, sep string) string {
	sc := bufio.NewScanner(strings.NewReader(readFile(path)))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), sep)
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// memory turns /proc/meminfo's "24683620 kB" into "23.5 GiB".
func memory(s string) string {
	var kb float64
	if _, err := fmt.Sscanf(s, "%f kB", &kb); err != nil {
		return s
	}
	return fmt.Sprintf("%.1f GiB", kb/(1<<20))
}

// MergeTags returns extra plus the build tags a GOFLAGS value sets (-tags=a,b or -tags a,b).
func MergeTags(extra, goflags string) string {
	f := strings.Fields(goflags)
	for i, a := range f {
		var v string
		switch {
		case strings.HasPrefix(a, "-tags="), strings.HasPrefix(a, "--tags="):
			_, v, _ = strings.Cut(a, "=")
		case (a == "-tags" || a == "--tags") && i+1 < len(f):
			v = f[i+1]
		default:
			continue
		}
		if v = strings.Trim(v, `"'`); v != "" {
			return extra + "," + v
		}
	}
	return extra
}
