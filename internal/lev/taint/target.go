package taint

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Target extracts what a policy matches an outbound call against: the URL's host for the
// web and HTTP tools, the command line for shell, the query for web_search, "result" for
// submit_output. For an unknown tool it is the first of url, target, host, command, path
// that is a string, else "". The gate receives it in live runs exactly as `lev policy test`
// takes it on the command line.
func Target(tool string, args map[string]any) string {
	str := func(k string) string {
		if v, ok := args[k].(string); ok {
			return v
		}
		return ""
	}
	switch tool {
	case "web_fetch", "http_get", "http_post":
		return HostOf(str("url"))
	case "web_search":
		return str("query")
	case "shell":
		if c := str("command"); c != "" {
			return c
		}
		if a, ok := args["argv"].([]any); ok {
			parts := make([]string, 0, len(a))
			for _, p := range a {
				parts = append(parts, fmt.Sprint(p))
			}
			return strings.Join(parts, " ")
		}
		return ""
	case "submit_output":
		return "result"
	}
	for _, k := range []string{"url", "target", "host", "command", "path"} {
		if v := str(k); v != "" {
			if k == "url" {
				return HostOf(v)
			}
			return v
		}
	}
	return ""
}

// HostOf returns the lower-cased host of a URL without port, userinfo or trailing dot. A
// string that does not parse as an absolute URL is returned whole (lower-cased), so that a
// pattern for a host cannot match it by accident.
func HostOf(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return strings.ToLower(strings.TrimSpace(raw))
	}
	h := u.Hostname()
	if ip := net.ParseIP(h); ip != nil {
		return ip.String()
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}
