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

// MarshalJSON keeps Path and Target byte for byte.
func (e BaselineEntry) MarshalJSON() ([]byte, error) {
	type plain BaselineEntry
	p := plain(e)
	p.Path, p.Target = encodeName(p.Path), encodeName(p.Target)
	return json.Marshal(p)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (e *BaselineEntry) UnmarshalJSON(b []byte) error {
	type plain BaselineEntry
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var err1, err2 error
	p.Path, err1 = decodeName(p.Path)
	p.Target, err2 = decodeName(p.Target)
	*e = BaselineEntry(p)
	if err1 != nil {
		return err1
	}
	return err2
}

// MarshalJSON keeps Path and Target byte for byte.
func (c Change) MarshalJSON() ([]byte, error) {
	type plain Change
	p := plain(c)
	p.Path, p.Target = encodeName(p.Path), encodeName(p.Target)
	return json.Marshal(p)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (c *Change) UnmarshalJSON(b []byte) error {
	type plain Change
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var err1, err2 error
	p.Path, err1 = decodeName(p.Path)
	p.Target, err2 = decodeName(p.Target)
	*c = Change(p)
	if err1 != nil {
		return err1
	}
	return err2
}

// MarshalJSON keeps Path byte for byte.
func (f SpecialFile) MarshalJSON() ([]byte, error) {
	type plain SpecialFile
	p := plain(f)
	p.Path = encodeName(p.Path)
	return json.Marshal(p)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (f *SpecialFile) UnmarshalJSON(b []byte) error {
	type plain SpecialFile
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var err error
	p.Path, err = decodeName(p.Path)
	*f = SpecialFile(p)
	return err
}
