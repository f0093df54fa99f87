package bringup

// Action is what the plan says a step will do (printed by --dry-run, and in its JSON as
// "action").
type Action string

const (
	ActionKeep   Action = "keep"   // skipped: what it would make is there (at most a re-check without a guest call)
	ActionCreate Action = "create" // make what is missing (or recreate what changed)
	ActionRepair Action = "repair" // something is there but wrong: fix it in place
	ActionStart  Action = "start"  // something is there but not running: start it
)

// Planned is one step of the plan.
type Planned struct {
	ID     string `json:"id"`
	Action Action `json:"action"`
	Why    string `json:"why"`
}

// Plan decides each step's action by the table's skip rules. It is pure.
func Plan(agents []string, containers []string, o Observed) []Planned {
	pi := PlanInput{Agents: agents, Containers: containers, Obs: o}
	out := make([]Planned, 0, len(Steps))
	for _, s := range Steps {
		action, why := s.Plan(pi)
		out = append(out, Planned{ID: s.ID, Action: action, Why: why})
	}
	return out
}

// Plan is the plan for this instance from an observation (with egress, for a dry run).
func (in *Instance) Plan(o Observed) []Planned {
	in.mustBePrepared("Plan")
	var cs []string
	if plan, err := in.Containers(o.Facts); err == nil {
		for _, c := range plan {
			cs = append(cs, c.Name)
		}
	}
	return Plan(in.Agents(), cs, o)
}

// Changed reports whether a plan does anything.
func Changed(p []Planned) bool {
	for _, s := range p {
		if s.Action != ActionKeep {
			return true
		}
	}
	return false
}
