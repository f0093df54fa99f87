//go:build !darwin

package lima

// hostFacts has nothing to add off macOS: only darwin has a product version that decides
// the VM type.
func hostFacts() string { return "" }
