package bringup

import (
	"encoding/json"
	"testing"
)

// TestStateTypesKeepTheirJSON: the named state types print exactly the strings the JSON
// output carried when they were plain strings (--dry-run --json's "action", stop and
// destroy's "guest_action"), and an unknown value still round-trips as the string it is.
func TestStateTypesKeepTheirJSON(t *testing.T) {
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"keep", Planned{ID: StepJail, Action: ActionKeep, Why: "w"}, `{"id":"jail","action":"keep","why":"w"}`},
		{"create", Planned{ID: StepEgress, Action: ActionCreate}, `{"id":"egress","action":"create","why":""}`},
		{"repair", Planned{ID: StepBroker, Action: ActionRepair}, `{"id":"broker","action":"repair","why":""}`},
		{"start", Planned{ID: StepPodman, Action: ActionStart}, `{"id":"podman","action":"start","why":""}`},
		{"stopped", Lifecycle{Instance: "d", GuestAction: GuestStopped}, `{"instance":"d","backend":"","guest":"","guest_action":"stopped"}`},
		{"destroyed", Lifecycle{Instance: "d", GuestAction: GuestDestroyed}, `{"instance":"d","backend":"","guest":"","guest_action":"destroyed"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("got %s, want %s", b, tc.want)
			}
		})
	}
	var p Planned
	if err := json.Unmarshal([]byte(`{"id":"lev","action":"create"}`), &p); err != nil || p.Action != ActionCreate {
		t.Fatalf("decoding a plan row: %+v, %v", p, err)
	}
}
