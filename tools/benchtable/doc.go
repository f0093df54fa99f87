package main

import (
	"bufio"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Doc is a docs/benchmarks.md read back: its run's date and tags, and each package's
// section with the rows its tables hold.
type Doc struct {
	Date     string
	Tags     string
	Sections []Section
}

// Section is one package's part of the document.
type Section struct {
	Pkg    string
	Groups []Group
}

// Benches are the rows of all the section's tables.
func (s Section) Benches() []Bench {
	var out []Bench
	for _, g := range s.Groups {
		out = append(out, g.Benches...)
	}
	return out
}

// Group is one top-level benchmark's table.
type Group struct {
	Name    string // without the Benchmark prefix
	Text    string // from its "### Benchmark<Name>" line to the end of its table
	Benches []Bench
}

// keptNote marks a table carried over from an earlier run.
const keptNote = "_Kept from the run of "

// kept is g as carried over by a merge from the run of date (a table kept before already
// says from which run).
func (g Group) kept(date string) Group {
	if strings.Contains(g.Text, keptNote) {
		return g
	}
	head, rest, _ := strings.Cut(g.Text, "\n")
	g.Text = head + "\n\n" + keptNote + date + " (not rerun by the last `make bench`)._\n" + rest
	return g
}

var tagsRe = regexp.MustCompile("-tags ([^`]+)`")

// ParseDoc reads a document Render wrote. The goals table is skipped (it is recomputed);
// the first level-2 heading that is not a package path (the VM section appended from
// <out>-vm.md) ends the benchmark sections.
func ParseDoc(md string) Doc {
	var d Doc
	var cur *Section
	var grp *Group
	var text strings.Builder
	var cols []string
	endGroup := func() {
		if grp != nil && cur != nil {
			grp.Text = strings.TrimRight(text.String(), "\n") + "\n"
			cur.Groups = append(cur.Groups, *grp)
		}
		grp = nil
		text.Reset()
	}
	endSection := func() {
		endGroup()
		if cur != nil {
			d.Sections = append(d.Sections, *cur)
		}
		cur = nil
	}
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	skip := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			endSection()
			name := strings.TrimPrefix(line, "## ")
			if name == "Goals" {
				skip = true
				continue
			}
			if strings.ContainsAny(name, " \t") || !strings.Contains(name, "/") {
				return d // the hand-kept VM section: not benchmark rows
			}
			skip = false
			cur = &Section{Pkg: name}
			continue
		case cur == nil:
			if skip {
				continue
			}
			if v, ok := strings.CutPrefix(line, "- Date: "); ok && d.Date == "" {
				d.Date = v
			}
			if m := tagsRe.FindStringSubmatch(line); m != nil && d.Tags == "" {
				d.Tags = m[1]
			}
			continue
		case strings.HasPrefix(line, "### Benchmark"):
			endGroup()
			grp, cols = &Group{Name: strings.TrimPrefix(line, "### Benchmark")}, nil
		case grp == nil:
			continue
		case strings.HasPrefix(line, "|"):
			cells := tableCells(line)
			switch {
			case cols == nil:
				cols = cells
			case strings.HasPrefix(line, "|---"):
			default:
				if b, ok := rowBench(grp.Name, cols, cells); ok {
					grp.Benches = append(grp.Benches, b)
				}
			}
		}
		text.WriteString(line + "\n")
	}
	endSection()
	return d
}

func tableCells(line string) []string {
	f := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}

// rowBench reads one table row back (writeTable's columns: case, iterations, time/op,
// B/op, allocs/op, then the custom units).
func rowBench(group string, cols, cells []string) (Bench, bool) {
	if len(cells) != len(cols) || len(cols) < 5 {
		return Bench{}, false
	}
	b := Bench{Name: group, Metrics: map[string]float64{}}
	if cells[0] != "(all)" {
		b.Name += "/" + cells[0]
	}
	b.Iters, _ = strconv.ParseInt(cells[1], 10, 64)
	if d, err := time.ParseDuration(cells[2]); err == nil {
		b.Metrics["ns/op"] = float64(d.Nanoseconds())
		b.Order = append(b.Order, "ns/op")
	}
	for i := 3; i < len(cols); i++ {
		v, err := strconv.ParseFloat(cells[i], 64)
		if err != nil || math.IsNaN(v) {
			continue
		}
		b.Metrics[cols[i]] = v
		b.Order = append(b.Order, cols[i])
	}
	return b, true
}
