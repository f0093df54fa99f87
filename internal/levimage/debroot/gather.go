package debroot

import (
	_ "embed"
	"fmt"
	"sort"
	"strings"

	"github.com/lever-jail/lever/internal/guest"
)

// StateDigestPart defines state_digest (statedigest.sh), the package-state digest the
// default workbench's tag derives from; bring-up's observation call folds it in.
//
//go:embed statedigest.sh
var StateDigestPart string

//go:embed gather.sh
var gatherPart string

// Gather is the one guest call (as root) that reads everything Resolve needs
// (gather.sh); ParseGather reads its answer.
func Gather() guest.Script { return guest.NewScript(StateDigestPart, gatherPart) }

// gathered are the sections every answer has; alt.NAME ones come between.
var gathered = []string{"arch", "statussum", "status", "lists", "rootlinks", "altlinks", "certs", "end"}

// ParseGather turns Gather's sections into Inputs. An answer without the end section
// (cut off), or one whose command failed, is refused naming the section: an incomplete
// read would plan an incomplete image.
func ParseGather(secs guest.Sections) (Inputs, error) {
	for _, name := range gathered {
		sec, ok := secs[name]
		if !ok {
			return Inputs{}, fmt.Errorf("guest package listing is incomplete (no %s section)", name)
		}
		if sec.RC != 0 {
			return Inputs{}, fmt.Errorf("guest package listing: reading %s exited %d: %s", name, sec.RC, strings.TrimSpace(secs[name+".stderr"].Out))
		}
	}
	in := Inputs{Lists: map[string][]string{}, RootLinks: map[string]string{}, AltLinks: map[string]string{}}
	in.Arch = strings.TrimSpace(secs["arch"].Out)
	in.StatusSum = strings.TrimSpace(secs["statussum"].Out)
	if len(in.StatusSum) != 64 {
		return Inputs{}, fmt.Errorf("guest package listing has no dpkg status digest (got %q)", in.StatusSum)
	}
	in.Status = []byte(secs["status"].Out + "\n")
	for _, l := range lines(secs["lists"].Out) {
		// grep -H: /var/lib/dpkg/info/NAME.list:PATH
		file, p, ok := strings.Cut(l, ".list:")
		if !ok {
			return Inputs{}, fmt.Errorf("file list line %q has no .list: prefix", l)
		}
		name := file[strings.LastIndex(file, "/")+1:]
		in.Lists[name] = append(in.Lists[name], p)
	}
	for _, l := range lines(secs["rootlinks"].Out) {
		k, v, ok := strings.Cut(l, "\t")
		if !ok {
			return Inputs{}, fmt.Errorf("root symlink line %q", l)
		}
		in.RootLinks[k] = v
	}
	for _, l := range lines(secs["altlinks"].Out) {
		k, v, ok := strings.Cut(l, "\t")
		if !ok {
			return Inputs{}, fmt.Errorf("alternatives link line %q", l)
		}
		in.AltLinks[k] = v
	}
	var alts []string
	for name := range secs {
		if n, ok := strings.CutPrefix(name, "alt."); ok && !strings.HasSuffix(n, ".stderr") {
			alts = append(alts, n)
		}
	}
	sort.Strings(alts)
	for _, n := range alts {
		sec := secs["alt."+n]
		if sec.RC != 0 {
			return Inputs{}, fmt.Errorf("guest package listing: reading alternative %s exited %d", n, sec.RC)
		}
		a, err := parseAlternative(n, strings.Split(sec.Out, "\n"))
		if err != nil {
			return Inputs{}, err
		}
		in.Alternatives = append(in.Alternatives, a)
	}
	in.Certs = lines(secs["certs"].Out)
	return in, nil
}

// lines are the non-empty lines of s.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// parseAlternative reads /var/lib/dpkg/alternatives/NAME: the mode, the master link, then
// slave name/link pairs up to a blank line (the choices after it are not needed: the
// current choice is what /etc/alternatives/NAME points to).
func parseAlternative(name string, lines []string) (Alternative, error) {
	if len(lines) < 2 {
		return Alternative{}, fmt.Errorf("alternatives file %s: too short", name)
	}
	a := Alternative{Links: map[string]string{name: lines[1]}}
	for i := 2; i+1 < len(lines) && lines[i] != ""; i += 2 {
		a.Links[lines[i]] = lines[i+1]
	}
	return a, nil
}
