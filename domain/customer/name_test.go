package customer

import (
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/escrowd/escrowd/domain"
)

// Real Yoruba, Igbo and Hausa names (and others with marks) are accepted
// and stored in NFC, however they were typed.
func TestNamesWithCombiningMarks(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"Ọ̀lá", "Ọ̀lá"},
		{"Adébáyọ̀", "Adébáyọ̀"},
		{"Nwánkwọ́", "Nwánkwọ́"},
		{"Ọlúwaṣeun", "Ọlúwaṣeun"},
		{"Chukwúdìnmà", "Chukwúdìnmà"},
		{"Ɗanjuma", "Ɗanjuma"},     // Hausa hooked D
		{"Ƙwarƙwaro", "Ƙwarƙwaro"}, // Hausa hooked K
		{"Ngozi-Adaeze", "Ngozi-Adaeze"},
		{"O'Neil", "O'Neil"},
		{"D’Souza", "D’Souza"},
		{"St. John", "St. John"},
		{"  Fúnmiláyọ̀  ", "Fúnmiláyọ̀"},
		// Decomposed input (e + U+0301) is stored precomposed.
		{"Ade\u0301ba\u0301yo\u0323\u0300", "Adébáyọ̀"},
		{strings.Repeat("ọ̀", 100), strings.Repeat("ọ̀", 100)}, // 100 characters, each a letter with a mark
	} {
		got, err := normalizeName("firstname", c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if got != c.want || !norm.NFC.IsNormalString(got) {
			t.Errorf("%q stored as %q (%+q), want %q", c.in, got, got, c.want)
		}
	}
}

func TestNamesRefused(t *testing.T) {
	const msg = "firstname must be 1-100 letters, spaces, hyphens, apostrophes or dots"
	for _, c := range []struct{ name, in, want string }{
		{"empty", "  ", "firstname is required"},
		{"digits", "Ada1", msg},
		{"symbols", "Ada<script>", msg},
		{"starts with a mark", "\u0301Ada", msg},
		{"starts with a hyphen", "-Ada", msg},
		{"a mark after a space", "Ada \u0301", msg},
		{"five marks on one letter (after composing)", "A\u0300\u0301\u0302\u0303\u0304\u0306da", msg},
		{"101 characters", strings.Repeat("a", 101), msg},
		{"101 characters with marks", strings.Repeat("ọ̀", 101), msg},
		{"emoji", "Ada😀", msg},
		{"zero-width joiner", "Ad\u200da", msg},
	} {
		_, err := normalizeName("firstname", c.in)
		if domain.ErrorMessage(err) != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
