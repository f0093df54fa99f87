// Package all imports every backend so that each registers itself; import it wherever the
// full set is needed (the CLI, the matrix test).
package all

import (
	_ "github.com/lever-jail/lever/internal/backend/lima"     // registers "lima"
	_ "github.com/lever-jail/lever/internal/backend/netns"    // registers "netns"
	_ "github.com/lever-jail/lever/internal/backend/orbstack" // registers "orbstack"
)
