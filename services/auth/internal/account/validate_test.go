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
	// Invisible and format characters (issue 43, row 7): word joiner,
	// invisible operators, deprecated format controls, soft hyphen,
	// Mongolian vowel separator, interlinear annotation, tags, and the
	// invisible letters of other categories.
	for r := rune(0x2060); r <= 0x2064; r++ {
		refused = append(refused, r)
	}
	for r := rune(0x206A); r <= 0x206F; r++ {
		refused = append(refused, r)
	}
	refused = append(refused, 0x00AD, 0x180E, 0xFFF9, 0xFFFA, 0xFFFB, 0xE0001, 0xE0041, 0xE007F, 0x0600, 0x110BD,
		0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0)
	for _, r := range refused {
		for _, s := range []string{string(r), "Ada" + string(r) + "Lovelace", "Ada Lovelace" + string(r)} {
			for _, check := range []func(string, string) error{checkChars, checkDisplayChars} {
				var v *ValidationError
				if err := check("email", s); !errors.As(err, &v) || v.Field != "email" || v.Code != "invalid_characters" {
					t.Fatalf("check(%q) = %v, want invalid_characters naming email", s, err)
				}
			}
		}
	}
	for _, r := range refused {
		for _, s := range []string{string(r), "Ada" + string(r) + "Lovelace", "Ada Lovelace" + string(r)} {
			err := checkChars("fullName", s)
			var v *ValidationError
			if !errors.As(err, &v) || v.Field != "fullName" || v.Code != "invalid_characters" || v.Message != "fullName contains invisible, control or bidirectional-override characters" {
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
		if err := checkDisplayChars("fullName", s); err != nil {
			t.Errorf("checkDisplayChars(%q) = %v, want nil", s, err)
		}
	}
	// Identifiers keep no format character, the joiners and marks
	// included: an address with one is another address that looks the
	// same.
	for _, r := range []rune{0x200C, 0x200D, 0x200E, 0x200F, 0x061C} {
		if err := checkChars("email", "ro"+string(r)+"ot@example.com"); err == nil {
			t.Errorf("checkChars accepted U+%04X", r)
		}
	}
	for _, s := range []string{"", "root@example.com", "José", "李小龙", "A\u00a0B"} {
		if err := checkChars("email", s); err != nil {
			t.Errorf("checkChars(%q) = %v, want nil", s, err)
		}
	}
}

func TestCleanTextRemovesWhatTheCheckRefuses(t *testing.T) {
	for in, want := range map[string]string{
		"Mozilla/5.0 (X11; Linux x86_64)":          "Mozilla/5.0 (X11; Linux x86_64)",
		"curl\u202e/8.0":                           "curl/8.0",
		"a\u2060b\u00adc\U000e0041d\u3164e\u200df": "abcdef",
		"x\ty\r\nz":   "xyz",
		"bad\xffutf8": "badutf8",
		"Ünïcödé 李":   "Ünïcödé 李",
	} {
		if got := CleanText(in); got != want {
			t.Errorf("CleanText(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every text field goes through the check, before trimming.
func TestValidatorsRefuseControlCharacters(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func() error
	}{
		{"text", func() error { _, err := validateText("sector", "x\u202e", maxSector, false, displayText); return err }},
		{"textTrailingNewline", func() error { _, err := validateText("fullName", "Ada\n", maxName, true, displayText); return err }},
		{"email", func() error { _, err := validateEmail("email", "ada\u202e@example.com"); return err }},
		{"emailTrailingNewline", func() error { _, err := validateEmail("email", "ada@example.com\r\n"); return err }},
		{"url", func() error { _, err := validateURL("avatarUrl", "https://example.com/\u2066a"); return err }},
		{"textInvisible", func() error { _, err := validateText("fullName", "Ada\u2060", maxName, true, displayText); return err }},
		{"codeJoiner", func() error { _, err := validateText("edv", "E\u200d1", maxEDV, true, codeText); return err }},
		{"emailTag", func() error { _, err := validateEmail("email", "root\U000e0041@example.com"); return err }},
		{"emailSoftHyphen", func() error { _, err := validateEmail("email", "root@example.com\u00ad"); return err }},
		{"emailWordJoiner", func() error { _, err := validateEmail("email", "ro\u2060ot@example.com"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v *ValidationError
			if err := tc.err(); !errors.As(err, &v) || v.Code != "invalid_characters" {
				t.Fatalf("got %v, want invalid_characters", err)
			}
		})
	}
}
