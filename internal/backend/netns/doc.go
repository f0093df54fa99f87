// Package netns is the netns backend (being built).
package netns
