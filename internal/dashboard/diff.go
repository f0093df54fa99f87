package dashboard

// DiffLine is one line of a ruleset diff: Op is ' ' (in both), '-' (desired only: missing
// from the live ruleset) or '+' (live only: a rule nobody asked for).
type DiffLine struct {
	Op   string
	Text string
}

// Diff is the line diff from desired to live (longest common subsequence; rulesets are
// a few hundred lines at most).
func Diff(desired, live []string) []DiffLine {
	n, m := len(desired), len(live)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if desired[i] == live[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []DiffLine
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && desired[i] == live[j]:
			out = append(out, DiffLine{" ", desired[i]})
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			out = append(out, DiffLine{"+", live[j]})
			j++
		default:
			out = append(out, DiffLine{"-", desired[i]})
			i++
		}
	}
	return out
}
