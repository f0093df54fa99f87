// Package update is lev's update check: it asks the project's GitHub releases endpoint
// for the latest release and compares its tag with this build's version. lev update runs
// one check; the daemon serves GET /api/update from a copy cached for CacheTTL, so a
// dashboard polling it does not poll GitHub.
//
// The releases answer is a remote peer's body like any other: it is read through capread
// under the 64 MiB BodyCap, and past it the check fails with capread's message naming the
// cap and the peer. It owns the check and its cache. It must not download or install
// anything: lev runs in a jail its operator provisions, and a binary swapped from inside
// would be one the operator never chose.
package update

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lever-jail/lever/internal/lev/capread"
)

// DefaultURL is the releases answer checked when LEV_UPDATE_URL is not set.
const DefaultURL = "https://api.github.com/repos/lever-jail/lever/releases/latest"

// URLEnv overrides DefaultURL (a mirror, or a test's loopback server).
const URLEnv = "LEV_UPDATE_URL"

// CacheTTL is how long the daemon serves one check's answer.
const CacheTTL = time.Hour

// Timeout bounds one check, connect to last byte.
const Timeout = 30 * time.Second

// SourceURL is the releases URL in force: $LEV_UPDATE_URL, else DefaultURL.
func SourceURL() string {
	if v := strings.TrimSpace(os.Getenv(URLEnv)); v != "" {
		return v
	}
	return DefaultURL
}

// Report is one check's answer (lev update --json, GET /api/update).
type Report struct {
	Current         string `json:"current"`
	Latest          string `json:"latest"`
	URL             string `json:"url,omitempty"`
	UpdateAvailable bool   `json:"update_available"`
	// Note says why no comparison was made (a development build has no version).
	Note    string    `json:"note,omitempty"`
	Source  string    `json:"source"`
	Checked time.Time `json:"checked"`
}

// release is the part of GitHub's release object the check reads; the rest is ignored.
type release struct {
	Tag string `json:"tag_name"`
	URL string `json:"html_url"`
}

// Checker checks one source and caches the last good answer.
type Checker struct {
	URL     string       // the releases answer; "" is SourceURL()
	Current string       // this build's version
	Client  *http.Client // nil: a client with Timeout
	TTL     time.Duration
	Now     func() time.Time

	mu     sync.Mutex
	cached *Report
}

func (c *Checker) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Check asks the source now.
func (c *Checker) Check(ctx context.Context) (*Report, error) {
	src := c.URL
	if src == "" {
		src = SourceURL()
	}
	u, err := url.Parse(src)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("update source %q (%s): want an http(s) URL", src, URLEnv)
	}
	client := c.Client
	if client == nil {
		client = &http.Client{Timeout: Timeout}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, fmt.Errorf("update check: %w", err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("update check: %w", err)
	}
	// Read under the cap whatever the status: an error page is a body like any other.
	body, err := capread.Body(resp)
	if err != nil {
		return nil, fmt.Errorf("update check: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("update check: %s answered %s", capread.Peer(resp), resp.Status)
	}
	var rel release
	if err := json.Unmarshal(body, &rel); err != nil {
		return nil, fmt.Errorf("update check: the answer from %s is not a release: %w", capread.Peer(resp), err)
	}
	if rel.Tag == "" {
		return nil, fmt.Errorf("update check: the answer from %s has no tag_name", capread.Peer(resp))
	}
	r := &Report{Current: c.Current, Latest: rel.Tag, URL: rel.URL, Source: src, Checked: c.now().UTC()}
	newer, err := Newer(rel.Tag, c.Current)
	if err != nil {
		r.Note = err.Error()
	} else {
		r.UpdateAvailable = newer
	}
	return r, nil
}

// Cached returns the last answer while it is younger than the TTL, else checks again.
// A failed check is not cached: the next request tries again.
func (c *Checker) Cached(ctx context.Context) (*Report, error) {
	ttl := c.TTL
	if ttl <= 0 {
		ttl = CacheTTL
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cached != nil && c.now().Sub(c.cached.Checked) < ttl {
		cp := *c.cached
		return &cp, nil
	}
	r, err := c.Check(ctx)
	if err != nil {
		return nil, err
	}
	c.cached = r
	cp := *r
	return &cp, nil
}

// Newer reports whether tag is a later version than current (both vMAJOR.MINOR.PATCH, the
// v optional, anything after a '-' or '+' ignored).
func Newer(tag, current string) (bool, error) {
	cv, err := parse(current)
	if err != nil {
		return false, fmt.Errorf("this build's version %q is not a release version; not compared", current)
	}
	tv, err := parse(tag)
	if err != nil {
		return false, fmt.Errorf("the latest release's tag %q is not a version; not compared", tag)
	}
	for i := range tv {
		if tv[i] != cv[i] {
			return tv[i] > cv[i], nil
		}
	}
	return false, nil
}

func parse(v string) ([3]int, error) {
	var out [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, errors.New("not MAJOR.MINOR.PATCH")
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, errors.New("not a number")
		}
		out[i] = n
	}
	return out, nil
}
