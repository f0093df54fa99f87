package taint

import (
	"sort"
	"sync"
)

// EntryID names one labelled entry inside a Context.
type EntryID uint64

// Entry is one piece of data the runtime put into a context region (a tool result, the
// task, a seed), with the label the runtime gave it and a note of where it came from.
type Entry struct {
	ID     EntryID
	Region string
	Level  Level
	Origin string
}

// Context tracks the live entries of an agent's context regions. A region's label is the
// highest label among its live entries, so it falls again when the entry that raised it is
// evicted; nothing else can lower it. Safe for concurrent use.
type Context struct {
	mu      sync.Mutex
	next    EntryID
	entries map[EntryID]Entry
}

// NewContext returns an empty context: every region Public.
func NewContext() *Context {
	return &Context{entries: map[EntryID]Entry{}}
}

// Add records an entry the runtime placed in region, labelled l. The level is the
// runtime's decision (see ResultLevel); callers must never derive it from model output.
func (c *Context) Add(region string, l Level, origin string) EntryID {
	if !l.Valid() {
		// An impossible label fails closed rather than slipping under every clearance.
		l = Private
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	c.entries[c.next] = Entry{ID: c.next, Region: region, Level: l, Origin: origin}
	return c.next
}

// Evict drops one entry (compaction, truncation, a sliding window). It reports whether the
// entry was live.
func (c *Context) Evict(id EntryID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[id]
	delete(c.entries, id)
	return ok
}

// EvictRegion drops every entry of region and returns how many there were.
func (c *Context) EvictRegion(region string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for id, e := range c.entries {
		if e.Region == region {
			delete(c.entries, id)
			n++
		}
	}
	return n
}

// RegionLevel is the label of one region: the max of its live entries, Public when empty.
func (c *Context) RegionLevel(region string) Level {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := Public
	for _, e := range c.entries {
		if e.Region == region {
			l = Max(l, e.Level)
		}
	}
	return l
}

// Level is the label of everything the model can currently see: the max over all regions.
// This is what an outbound tool call is compared against, because the model may copy any
// live byte into a tool's arguments.
func (c *Context) Level() Level {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := Public
	for _, e := range c.entries {
		l = Max(l, e.Level)
	}
	return l
}

// Live returns the live entries, oldest first.
func (c *Context) Live() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Entry, 0, len(c.entries))
	for _, e := range c.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
