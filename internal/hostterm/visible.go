package hostterm

import "unicode"

// The class the neutraliser shows escaped is every character a terminal would not draw
// as itself: a control it may obey, or a character it draws as nothing or uses to
// reorder or restyle what it draws. Drawn as nothing, a character can carry a message a
// person never sees (the tag characters U+E0000-U+E007F spell ASCII invisibly, and a
// model reads them), split a word so it reads as another, or make the command an
// approval prompt shows differ from the one that runs. The class, by Unicode property
// rather than by list, so a character added to a category is covered too:
//
//   - C0, DEL and C1 (U+0080-U+009F): controls a terminal may obey (escape handles C0
//     and DEL itself, for the layout a caller keeps);
//   - every character that is not graphic and not private use: the format characters
//     (Cf: the bidirectional controls, the zero-width characters, U+FEFF, the soft
//     hyphen, the tag characters, the interlinear annotation marks), the line and
//     paragraph separators U+2028/U+2029 (a terminal may break the line there), the
//     surrogates, and every unassigned code point and noncharacter (what a terminal
//     draws for them is unknown, often nothing);
//   - the other default-ignorable characters (Other_Default_Ignorable_Code_Point: the
//     Hangul fillers, U+034F, U+17B4/U+17B5, U+2065, U+FFF0-U+FFF8 and the rest of
//     plane 14), graphic by category but drawn as nothing;
//   - the variation selectors (U+180B-U+180F, U+FE00-U+FE0F, U+E0100-U+E01EF) except
//     one of U+FE00-U+FE0F or U+180B-U+180F directly after a visible character: that is
//     how an emoji asks for its colour form (❤️ is U+2764 U+FE0F), and one selector per
//     drawn character cannot hide a message; a second, one after nothing visible, and
//     the supplementary selectors (a run of them after one character is the known way
//     to smuggle bytes) are shown.
//
// Private use (Co) is drawn as a glyph or a box, so it is text. Spaces of other widths
// (U+00A0, U+2000-U+200A, U+3000) are drawn as space, as what they are.

// shown says how escape treats r: pass it, or show it escaped. prevBase says whether the
// character before r was drawn as itself and can carry a variation selector.
func shown(r rune, prevBase bool) bool {
	switch {
	case r < 0x20 || (r >= 0x7f && r <= 0x9f):
		return false
	case unicode.Is(unicode.Variation_Selector, r):
		return prevBase && r < 0x10000
	case unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r):
		return false
	case unicode.IsGraphic(r), unicode.Is(unicode.Co, r):
		return true
	}
	return false
}

// isBase says whether r, drawn as itself, can carry one variation selector: a visible
// character, not a space and not itself a selector.
func isBase(r rune) bool {
	return r > ' ' && !unicode.IsSpace(r) && !unicode.Is(unicode.Variation_Selector, r)
}
