// Package layers holds no code: its tests hold the module's import graph to the layers
// docs/architecture.md draws. The layer table (layers_test.go) is the one statement of
// which package sits where; every package of the module must be in it, every import must
// go down or sideways, the map in docs/architecture.md is generated from the real graph
// and compared, and the host packages' "must not" rows name what each may never reach.
package layers
