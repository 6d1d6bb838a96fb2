package protocol

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// encoding/json matches an object's keys to struct fields without regard to
// case: {"Command":...} fills Command as {"command":...} does, and
// DisallowUnknownFields lets it through. The protocol's keys are exact
// (ref 5): a key in another case is a caller's mistake, and two bodies that
// mean the same thing must look the same to everything that reads them (a
// check of the raw body, a log, a second decoder). exactKeys walks the body
// a second time next to the type it was decoded into and names the first
// key that matched a field only in another case.

// exactKeys returns the first object key of body that names no field of t
// exactly, with the field it matched. body has already decoded into t
// without error, so it is one valid JSON value.
func exactKeys(body []byte, t reflect.Type) (key, field string, err error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	return walkKeys(dec, t)
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// custom says whether t decodes itself: what it accepts is its own rule
// (json.RawMessage, time.Time), so its keys are not checked here.
func custom(t reflect.Type) bool {
	return t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)
}

// walkKeys reads one value from dec. t is the Go type it was decoded into;
// nil when any key goes (an interface, a type that decodes itself).
func walkKeys(dec *json.Decoder, t reflect.Type) (string, string, error) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() == reflect.Interface || custom(t) || !mayHoldFields(t) {
		// Nothing in this value is a struct's key: it is read over whole,
		// without a token for each of its parts (an event's data, a list
		// of strings).
		var skip json.RawMessage
		return "", "", dec.Decode(&skip)
	}
	tok, err := dec.Token()
	if err != nil {
		return "", "", err
	}
	switch tok {
	case json.Delim('{'):
		var fields map[string]fieldKey
		if t != nil && t.Kind() == reflect.Struct {
			fields = fieldsOf(t)
		}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", "", err
			}
			k, _ := kt.(string)
			var next reflect.Type
			switch {
			case fields != nil:
				f, ok := fields[k]
				if !ok {
					return k, matchFold(fields, k), nil
				}
				next = f.typ
			case t != nil && t.Kind() == reflect.Map:
				next = t.Elem()
			}
			if key, field, err := walkKeys(dec, next); key != "" || err != nil {
				return key, field, err
			}
		}
		_, err = dec.Token() // '}'
		return "", "", err
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if key, field, err := walkKeys(dec, elem); key != "" || err != nil {
				return key, field, err
			}
		}
		_, err = dec.Token() // ']'
		return "", "", err
	}
	return "", "", nil
}

// mayHoldFields says whether a value of t can hold a struct's keys: a
// struct, or a map, slice, array or pointer of something that can. A
// struct ends the walk down, so a type that refers to itself does too.
func mayHoldFields(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Struct:
		return true
	case reflect.Map, reflect.Slice, reflect.Array, reflect.Pointer:
		return mayHoldFields(t.Elem())
	}
	return false
}

// matchFold is the field a key matched in another case ("" when none: a
// body decoded without error has one).
func matchFold(fields map[string]fieldKey, k string) string {
	for name := range fields {
		if strings.EqualFold(name, k) {
			return name
		}
	}
	return ""
}

// fieldKey is one key a struct decodes, with the type of its field.
type fieldKey struct {
	typ   reflect.Type
	depth int
}

var fieldCache sync.Map // reflect.Type -> map[string]fieldKey

// fieldsOf lists the keys encoding/json decodes into struct type t, by the
// same rules: a tag's name, else the field's; "-" skips a field; the fields
// of an embedded struct without a tag's name are promoted, a shallower one
// winning over a deeper one of the same name.
func fieldsOf(t reflect.Type) map[string]fieldKey {
	if v, ok := fieldCache.Load(t); ok {
		return v.(map[string]fieldKey)
	}
	out := map[string]fieldKey{}
	addFields(out, t, 0, map[reflect.Type]bool{})
	fieldCache.Store(t, out)
	return out
}

func addFields(out map[string]fieldKey, t reflect.Type, depth int, seen map[reflect.Type]bool) {
	if seen[t] {
		return
	}
	seen[t] = true
	defer delete(seen, t)
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if name == "" && et.Kind() == reflect.Struct {
				addFields(out, et, depth+1, seen)
				continue
			}
			if !f.IsExported() && et.Kind() != reflect.Struct {
				continue
			}
		} else if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if have, ok := out[name]; !ok || depth < have.depth {
			out[name] = fieldKey{typ: ft, depth: depth}
		}
	}
}

// checkKeys refuses a body whose keys match v's fields only in another case.
func checkKeys(body []byte, v any) error {
	key, field, err := exactKeys(body, reflect.TypeOf(v))
	if err != nil {
		// The body decoded already, so the walk does not fail on it; if it
		// ever does, the body is refused rather than let through unchecked.
		return &DecodeError{Problem: BodyMalformed, msg: "the body's keys could not be checked: " + describe(err)}
	}
	if key == "" {
		return nil
	}
	msg := fmt.Sprintf("the body has an unknown field %q", key)
	if field != "" {
		msg += fmt.Sprintf(" (keys are matched exactly: the field is %q)", field)
	}
	return &DecodeError{Problem: BodyUnknownField, msg: msg}
}
