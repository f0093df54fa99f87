//go:build e2e

package sandbox

import "testing"

// Exported for the external test package (run_e2e_test.go), which drives real lev runs
// and so imports runner, which imports this package.

func PodmanFixture(tb testing.TB) *fixture            { return podmanFixture(tb) }
func (f *fixture) RootlessOptions() Options           { return f.rootlessOptions() }
func (f *fixture) Workdir(tb testing.TB) string       { return f.workdir(tb) }
func (f *fixture) AsUser(a ...string) (string, error) { return f.asUser(a...) }
func (f *fixture) Image() string                      { return f.image }
func (f *fixture) UID() int                           { return f.uid }
