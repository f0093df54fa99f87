// Package all imports every backend so that each registers itself; import it wherever the
// full set is needed (the CLI, the matrix test). It holds no code and must not: a backend
// registers itself in its own init.
package all

import (
	_ "github.com/lever-jail/lever/internal/backend/lima"     // registers "lima"
	_ "github.com/lever-jail/lever/internal/backend/netns"    // registers "netns"
	_ "github.com/lever-jail/lever/internal/backend/orbstack" // registers "orbstack"
)
