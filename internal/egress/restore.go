package egress

import (
	"strings"
)

// ChainRestore is the iptables-restore --noflush input that replaces the family's chain in
// one transaction: the `:LEVER_EGRESS` line declares (or empties) the chain and the rules
// follow, so the old rules stay in force until the new ones are and a failed commit leaves
// the old chain in place. Nothing else in the table is touched.
func ChainRestore(rules []string) string {
	var b strings.Builder
	b.WriteString("*filter\n:" + Chain + " - [0:0]\n")
	for _, r := range rules {
		b.WriteString(r)
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// JumpRestore is the iptables-restore --noflush input that makes the jump OUTPUT's first
// and only copy in one transaction: it deletes the copies the live listing shows and
// inserts one at position 1, so OUTPUT is never without it. chainExists says whether the
// chain is live: declaring an existing chain in a --noflush restore would empty it, so it
// is declared only when missing (then it is empty either way).
func JumpRestore(chainExists bool, copies int) string {
	var b strings.Builder
	b.WriteString("*filter\n")
	if !chainExists {
		b.WriteString(":" + Chain + " - [0:0]\n")
	}
	for i := 0; i < copies; i++ {
		b.WriteString("-D OUTPUT -j " + Chain + "\n")
	}
	b.WriteString("-I OUTPUT 1 -j " + Chain + "\nCOMMIT\n")
	return b.String()
}

// JumpCommit is the JumpRestore input for this live state: it deletes the copies of the
// jump this family's OUTPUT holds and declares the chain only when it is missing. Apply and
// `lever egress plan` both take it from here, so what is planned is what is committed.
func (s FamilyState) JumpCommit() string { return JumpRestore(s.ChainExists, s.JumpCopies()) }
