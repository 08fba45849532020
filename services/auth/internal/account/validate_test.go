package account

import (
	"errors"
	"testing"
)

func TestCheckCharsRefusesControlAndBidiCharacters(t *testing.T) {
	var refused []rune
	for r := rune(0); r <= 0x1F; r++ {
		refused = append(refused, r)
	}
	for r := rune(0x7F); r <= 0x9F; r++ {
		refused = append(refused, r)
	}
	for r := rune(0x202A); r <= 0x202E; r++ {
		refused = append(refused, r)
	}
	for r := rune(0x2066); r <= 0x2069; r++ {
		refused = append(refused, r)
	}
	refused = append(refused, 0x200B, 0xFEFF, 0x2028, 0x2029)
	for _, r := range refused {
		for _, s := range []string{string(r), "Ada" + string(r) + "Lovelace", "Ada Lovelace" + string(r)} {
			err := checkChars("fullName", s)
			var v *ValidationError
			if !errors.As(err, &v) || v.Field != "fullName" || v.Code != "invalid_characters" || v.Message != "fullName contains control or bidirectional-override characters" {
				t.Fatalf("checkChars(%q) = %v, want invalid_characters naming fullName", s, err)
			}
		}
	}
	for _, s := range []string{
		"", "Ada Lovelace", "José Ñúñez", "Zoë O'Brien-Smith", "李小龙", "محمد", "שלום",
		"می\u200cخواهم", // zero-width non-joiner: Persian needs it
		"👩\u200d💻",      // zero-width joiner: emoji sequences
		"abc\u200edef",  // left-to-right mark
		"abc\u200fdef",  // right-to-left mark
		"A\u00a0B",      // no-break space (category Zs)
	} {
		if err := checkChars("fullName", s); err != nil {
			t.Errorf("checkChars(%q) = %v, want nil", s, err)
		}
	}
}

// Every text field goes through the check, before trimming.
func TestValidatorsRefuseControlCharacters(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func() error
	}{
		{"text", func() error { _, err := validateText("sector", "x\u202e", maxSector, false); return err }},
		{"textTrailingNewline", func() error { _, err := validateText("fullName", "Ada\n", maxName, true); return err }},
		{"email", func() error { _, err := validateEmail("email", "ada\u202e@example.com"); return err }},
		{"emailTrailingNewline", func() error { _, err := validateEmail("email", "ada@example.com\r\n"); return err }},
		{"url", func() error { _, err := validateURL("avatarUrl", "https://example.com/\u2066a"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v *ValidationError
			if err := tc.err(); !errors.As(err, &v) || v.Code != "invalid_characters" {
				t.Fatalf("got %v, want invalid_characters", err)
			}
		})
	}
}
