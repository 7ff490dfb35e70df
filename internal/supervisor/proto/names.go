package proto

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// File names and link targets are bytes, not text: JSON would replace a
// name's bytes that are not UTF-8 with U+FFFD, and the patch would then name
// another file. Such a name travels as rawNamePrefix and its base64; the
// prefix starts with NUL, which no file name or link target holds.
const rawNamePrefix = "\x00b64:"

// encodeName is name as it travels in JSON.
func encodeName(name string) string {
	if utf8.ValidString(name) && !strings.HasPrefix(name, "\x00") {
		return name
	}
	return rawNamePrefix + base64.StdEncoding.EncodeToString([]byte(name))
}

// decodeName undoes encodeName.
func decodeName(s string) (string, error) {
	raw, ok := strings.CutPrefix(s, rawNamePrefix)
	if !ok {
		return s, nil
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	return string(b), err
}

// encodeNames encodes the name fields given, in place.
func encodeNames(names ...*string) {
	for _, n := range names {
		*n = encodeName(*n)
	}
}

// decodeNames undoes encodeNames.
func decodeNames(names ...*string) error {
	for _, n := range names {
		v, err := decodeName(*n)
		if err != nil {
			return err
		}
		*n = v
	}
	return nil
}

// MarshalJSON keeps Path and Target byte for byte.
func (e BaselineEntry) MarshalJSON() ([]byte, error) {
	type plain BaselineEntry
	p := plain(e)
	encodeNames(&p.Path, &p.Target)
	return json.Marshal(p)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (e *BaselineEntry) UnmarshalJSON(b []byte) error {
	type plain BaselineEntry
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	err := decodeNames(&p.Path, &p.Target)
	*e = BaselineEntry(p)
	return err
}

// MarshalJSON keeps Path and Target byte for byte.
func (c Change) MarshalJSON() ([]byte, error) {
	type plain Change
	p := plain(c)
	encodeNames(&p.Path, &p.Target)
	return json.Marshal(p)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (c *Change) UnmarshalJSON(b []byte) error {
	type plain Change
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	err := decodeNames(&p.Path, &p.Target)
	*c = Change(p)
	return err
}

// MarshalJSON keeps Path byte for byte.
func (f SpecialFile) MarshalJSON() ([]byte, error) {
	type plain SpecialFile
	p := plain(f)
	encodeNames(&p.Path)
	return json.Marshal(p)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (f *SpecialFile) UnmarshalJSON(b []byte) error {
	type plain SpecialFile
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	err := decodeNames(&p.Path)
	*f = SpecialFile(p)
	return err
}
