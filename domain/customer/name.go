package customer

import (
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/escrowd/escrowd/domain"
)

// Names are written as people spell them: letters of any script with
// their combining marks (Yoruba, Igbo and Hausa tone and dot-below marks,
// as in Ọ̀lá, Adébáyọ̀ or Nwánkwọ́), spaces, hyphens, apostrophes and dots.
const (
	// maxNameChars bounds a name in characters: a letter with its marks,
	// a space, hyphen, apostrophe or dot each count one.
	maxNameChars = 100
	// maxMarksPerLetter bounds the combining marks one letter carries
	// (Yoruba needs two: a dot below and a tone), so a name of 100
	// characters stays a bounded number of bytes.
	maxMarksPerLetter = 4
)

// nameSeparators are the characters a name may hold between letters: the
// typewriter apostrophe and the typographic one phones type.
const nameSeparators = " -'’."

// normalizeName trims v and returns it in Unicode normalization form C,
// the form names are stored and compared in: a name typed with
// precomposed letters (é) and one typed as a letter and a combining mark
// (e + ◌́) are then the same text.
func normalizeName(field, v string) (string, error) {
	v = norm.NFC.String(strings.TrimSpace(v))
	if v == "" {
		return "", domain.Invalidf("%s is required", field)
	}
	if !validName(v) {
		return "", domain.Invalidf("%s must be 1-100 letters, spaces, hyphens, apostrophes or dots", field)
	}
	return v, nil
}

// validName reports whether v (in NFC) starts with a letter, holds only
// letters with at most maxMarksPerLetter combining marks each and
// nameSeparators, and is at most maxNameChars characters.
func validName(v string) bool {
	chars, marks, afterLetter := 0, 0, false
	for _, r := range v {
		switch {
		case unicode.IsLetter(r):
			chars, marks, afterLetter = chars+1, 0, true
		case unicode.Is(unicode.M, r):
			if !afterLetter || marks == maxMarksPerLetter {
				return false
			}
			marks++
		case strings.ContainsRune(nameSeparators, r) && chars > 0:
			chars, marks, afterLetter = chars+1, 0, false
		default:
			return false
		}
	}
	return chars <= maxNameChars
}
