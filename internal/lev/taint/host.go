package taint

import (
	"net"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/net/idna"
)

// canonicalHost reads a URL's host (the authority without userinfo and port, as written)
// the way the clients that connect read it, and returns the one spelling a policy is
// matched against: a dotted-quad IPv4 address, a compressed IPv6 address (an IPv4-mapped
// one as its IPv4 address), or a lower-case ASCII DNS name without its trailing dot.
//
// Every spelling that reaches the same place must come out the same, or a deny rule on
// `target` can be walked around (issue 27, item 3). The forms:
//   - percent-encoding is decoded (WHATWG URL, curl and Go decode it; a client that does
//     not looks up a name with a % in it, which no resolver answers);
//   - a non-ASCII name is mapped by UTS #46 (IDNA), as browsers, curl (libidn2) and Go's
//     net/http do; a name the transitional and non-transitional mappings disagree on (ß,
//     ς, zero-width joiners) is unclear, since clients use either;
//   - a name whose last label is a number is an IPv4 address, read as inet_aton(3), WHATWG
//     and curl read it: one to four parts, each decimal, octal (leading 0) or hex (0x),
//     the last filling the remaining bytes (2130706433, 0177.0.0.1, 0x7f.1, 127.1). One
//     that does not fit (a part over its range, more than four parts) is unclear;
//   - one trailing dot is dropped (a fully qualified name; WHATWG drops it for IPv4 too).
//
// What is left must be a plain DNS name (letters, digits, '-', '_', '.'), else unclear.
func canonicalHost(h string) (host, unclear string) {
	if strings.HasPrefix(h, "[") {
		if !strings.HasSuffix(h, "]") {
			return "", "its url's IPv6 host is not closed by ']'"
		}
		inner := h[1 : len(h)-1]
		if strings.Contains(inner, "%") {
			return "", "its url's IPv6 host carries a zone or percent-encoding"
		}
		ip := net.ParseIP(inner)
		if ip == nil {
			return "", "its url's IPv6 host does not parse"
		}
		return ip.String(), "" // an IPv4-mapped address prints as its IPv4 address
	}
	dec, ok := percentDecode(h)
	if !ok {
		return "", "its url's host has a broken percent-encoding"
	}
	ascii := true
	for _, r := range dec {
		if r > unicode.MaxASCII {
			ascii = false
			break
		}
	}
	if !ascii {
		a, err := idna.Lookup.ToASCII(dec)
		if err != nil {
			return "", "its url's host is not a valid international name (" + err.Error() + ")"
		}
		tr, err := idna.New(idna.MapForLookup(), idna.Transitional(true)).ToASCII(dec)
		if err != nil || tr != a {
			return "", "its url's host maps to different names under the IDNA variants clients use"
		}
		dec = a
	}
	dec = strings.ToLower(dec)
	if ip := net.ParseIP(dec); ip != nil {
		return ip.String(), ""
	}
	dec = strings.TrimSuffix(dec, ".")
	if dec == "" {
		return "", "its url has no host"
	}
	labels := strings.Split(dec, ".")
	if numeric(labels[len(labels)-1]) {
		ip, ok := parseIPv4(labels)
		if !ok {
			return "", "its url's host ends in a number but is no IPv4 address clients agree on"
		}
		return ip, ""
	}
	for _, l := range labels {
		if l == "" {
			return "", "its url's host has an empty label"
		}
	}
	if strings.Trim(dec, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
		return "", "its url's host holds a character no DNS name has"
	}
	return dec, ""
}

// parseIPv4 reads a host's labels as inet_aton does (see canonicalHost).
func parseIPv4(parts []string) (string, bool) {
	if len(parts) > 4 {
		return "", false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := ipv4Part(p)
		if !ok {
			return "", false
		}
		nums[i] = n
	}
	var v uint64
	for i, n := range nums[:len(nums)-1] {
		if n > 255 {
			return "", false
		}
		v |= n << (8 * (3 - i))
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return "", false
	}
	v |= last
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).String(), true
}

// ipv4Part is one part's value: 0x hex (an empty one is 0, as WHATWG and inet_aton
// read it), a leading 0 octal, else decimal.
func ipv4Part(p string) (uint64, bool) {
	base := 10
	switch {
	case p == "":
		return 0, false
	case strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X"):
		p, base = p[2:], 16
		if p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		p, base = p[1:], 8
	}
	if len(p) > 32 {
		return 0, false
	}
	n, err := strconv.ParseUint(p, base, 64)
	if err != nil || n > 0xffffffff {
		return 0, false
	}
	return n, true
}

// percentDecode decodes %XX escapes; a '%' without two hex digits is broken.
func percentDecode(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), true
}

// hostSpan is where a URL's host is written in raw: after "://" and the userinfo (cut at
// the authority's last '@', as every parser does), before the port.
func hostSpan(raw string) (start, end int, ok bool) {
	sep := strings.Index(raw, "://")
	if sep < 0 {
		return 0, 0, false
	}
	start = sep + 3
	rest := raw[start:]
	authEnd := strings.IndexAny(rest, "/?#")
	if authEnd < 0 {
		authEnd = len(rest)
	}
	hostStart := strings.LastIndex(rest[:authEnd], "@") + 1
	hostPart := rest[hostStart:authEnd]
	if strings.HasPrefix(hostPart, "[") {
		if e := strings.Index(hostPart, "]"); e >= 0 {
			hostPart = hostPart[:e+1]
		}
	} else if c := strings.LastIndex(hostPart, ":"); c >= 0 {
		hostPart = hostPart[:c]
	}
	start += hostStart
	return start, start + len(hostPart), true
}

// DialURL is raw with its host written as the policy matched it (canonicalHost), for a
// built-in tool to dial: the tool must reach the place the gate saw. Go's resolver reads
// 2130706433 or 0x7f.1 as names and asks DNS for them, and refuses some percent-encoded
// hosts, where the gate matched 127.0.0.1 or evil.test. An unclear URL comes back as it
// was (the gate decided on its raw text).
func DialURL(raw string) string {
	h, why := hostOf(raw)
	if why != "" || h == "" {
		return raw
	}
	start, end, ok := hostSpan(raw)
	if !ok {
		return raw
	}
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return raw[:start] + h + raw[end:]
}
