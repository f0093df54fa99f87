package taint

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/idna"
)

// ErrAmbiguousHost marks a host literal that names an address in a spelling lev cannot
// read one way (0x7f.*, 0177.*): a policy naming it is refused at load, since matching
// it as text would let every other spelling past a deny rule and reading it as an
// address is a guess.
var ErrAmbiguousHost = errors.New("ambiguous host spelling")

// CanonicalHostLiteral is a host a policy names (an allow entry's target, a string a rule
// compares the target with) in the one spelling calls are matched in (canonicalHost): a
// user writing 0x7f.1, 2130706433, EXAMPLE.com., [::ffff:127.0.0.1] or an IDN in Unicode
// means the host every spelling of it reaches. A pattern with * or ? is canonicalised
// label by label (canonicalPattern). The error says why s is not one host; it wraps
// ErrAmbiguousHost when s reads as an address in more than one way.
func CanonicalHostLiteral(s string) (string, error) {
	if why := junk(s); why != "" {
		return "", errors.New("the host " + why)
	}
	if strings.ContainsAny(s, "*?") {
		return canonicalPattern(s)
	}
	if strings.ContainsAny(s, "/#@") {
		return "", errors.New("a host has no / ? # or @ (write the host alone, as calls are matched by host)")
	}
	h, why := canonicalHost(s)
	if why != "" {
		why = strings.TrimPrefix(why, "its url's host ")
		why = strings.TrimPrefix(why, "its url ")
		if strings.Contains(why, "number") {
			return "", fmt.Errorf("%w: it %s", ErrAmbiguousHost, why)
		}
		return "", errors.New("it " + why)
	}
	return h, nil
}

// idnaDots are the characters UTS #46 maps to a label separator: a name written with
// them ("evil\uff0etest") is the name with '.', and a pattern's labels are split on them.
var idnaDots = strings.NewReplacer("\uff0e", ".", "\u3002", ".", "\uff61", ".")

// canonicalPattern canonicalises a host pattern's literal labels. A label holding a
// wildcard must be plain ASCII (IDNA maps a whole label, which a wildcard leaves
// unknown), and a numeric label must be a decimal byte as a dotted quad writes it: a hex,
// octal or over-range part (0x7f.*, 0177.*) could be an address or a name, so the
// pattern is refused rather than read one way (a deny rule read as text would miss
// 127.0.0.1; read as an address, an allow entry might cover more than was meant).
func canonicalPattern(p string) (string, error) {
	if strings.ContainsAny(p, "%[]:/@#\\") {
		return "", errors.New("a host pattern holds only a name's labels, '.', * and ? (no port, path, userinfo, brackets or percent-encoding)")
	}
	p = strings.TrimSuffix(idnaDots.Replace(p), ".")
	labels := strings.Split(p, ".")
	for i, l := range labels {
		if l == "" {
			return "", errors.New("the host pattern has an empty label")
		}
		lower := strings.ToLower(l)
		wild := strings.ContainsAny(l, "*?")
		if strings.Trim(lower, "abcdefghijklmnopqrstuvwxyz0123456789-_*?") != "" {
			if wild {
				return "", errors.New("label " + l + " mixes a wildcard with characters IDNA maps as a whole label")
			}
			a, err := idna.Lookup.ToASCII(l)
			if err != nil {
				return "", errors.New("label " + l + " is not a valid international name (" + err.Error() + ")")
			}
			tr, err := idna.New(idna.MapForLookup(), idna.Transitional(true)).ToASCII(l)
			if err != nil || tr != a || strings.Contains(a, ".") {
				return "", errors.New("label " + l + " maps to different names under the IDNA variants clients use")
			}
			lower = a
		}
		if !wild && numeric(lower) && !decimalByte(lower) {
			return "", fmt.Errorf("%w: label %s is a number but not a dotted quad's decimal byte (0-255, no leading zero), so the pattern could read as an address in another spelling", ErrAmbiguousHost, l)
		}
		labels[i] = lower
	}
	return strings.Join(labels, "."), nil
}

// decimalByte: l is how a dotted quad writes one byte.
func decimalByte(l string) bool {
	if l == "" || len(l) > 3 || strings.Trim(l, "0123456789") != "" || (len(l) > 1 && l[0] == '0') {
		return false
	}
	n := 0
	for _, c := range l {
		n = n*10 + int(c-'0')
	}
	return n <= 255
}

// CanonicalTarget says whether t is a host as calls' targets are matched (canonicalHost
// leaves it as it is): only such a target is compared with a literal's canonical form.
func CanonicalTarget(t string) bool {
	if t == "" || junk(t) != "" {
		return false
	}
	h, why := canonicalHost(t)
	return why == "" && h == t
}

// unicodeForm maps a name or pattern as UTS #46 does (case, width, fullwidth dots) and
// decodes punycode labels, without STD3 rules, so that '*' and '?' pass through.
var unicodeForm = idna.New(idna.MapForLookup(), idna.StrictDomainName(false), idna.Transitional(false))

// UnicodeForms are a host pattern and a canonical target in the Unicode form IDNA maps
// both to, for a pattern that has no ASCII form because a wildcard shares a label with
// non-ASCII letters ("*bücher*"): punycode encodes a whole label, so only the decoded
// target can be compared with such a piece.
func UnicodeForms(pattern, target string) (p, t string, ok bool) {
	p, err := unicodeForm.ToUnicode(pattern)
	if err != nil {
		return "", "", false
	}
	t, err = unicodeForm.ToUnicode(target)
	if err != nil {
		return "", "", false
	}
	return p, t, true
}
