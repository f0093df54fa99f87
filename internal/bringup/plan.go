package bringup

// Planned is one step of the plan.
type Planned struct {
	ID     string `json:"id"`
	Action string `json:"action"` // keep | create | repair | start
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
		if s.Action != "keep" {
			return true
		}
	}
	return false
}
