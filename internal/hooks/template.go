package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/pgtext"
)

// The template syntax of a Webhook's task description, the whole of it:
//
//   - {{.a.b.c}} is the value at that path of the JSON body: the member c
//     of the object b of the object a. A segment that is a number indexes
//     an array ({{.commits.0.message}}). Spaces inside the braces are
//     allowed ({{ .issue.title }}).
//   - {{.}} is the whole body.
//   - A string is put in as it is; a number, true, false or null as JSON
//     writes them; an object or an array as compact JSON. A path that
//     leads nowhere puts in nothing.
//   - Anything else, {{ included, is text, kept as written.
//
// There are no functions, conditions or loops: rendering is one pass over
// the template, and its output is bounded (MaxDescription).
//
// Every value put in is the sender's, not the Webhook owner's: it is
// enclosed between UntrustedOpen and UntrustedClose, and the description
// begins with UntrustedNotice, so the Dot reads it as data.

// MaxDescription is the most characters a Task's description holds (its
// CRD's bound); values are cut so the description fits.
const MaxDescription = 20000

// UntrustedNotice begins every description a Webhook makes (with the
// Webhook's namespace/name): the one place the marker's words are, for the
// Dot's instructions and the guardrails to find.
const UntrustedNotice = protocol.UntrustedNotice

// The delimiters of the sender's values. A value holding them has them
// taken out, so a sender cannot close the block and speak as the owner.
const (
	UntrustedOpen  = protocol.UntrustedOpen
	UntrustedClose = protocol.UntrustedClose
)

// cutNote ends a value that was cut to fit.
const cutNote = "…(cut)"

var placeholder = regexp.MustCompile(`\{\{\s*(\.[^\s{}]*)\s*\}\}`)

// Payload is a delivery's body as the template reads it: decoded JSON, or
// the body's text when it is not JSON. A GitHub delivery sent as a form
// (application/x-www-form-urlencoded) is its payload field's JSON.
type Payload struct {
	value any
	raw   string
}

// ParsePayload decodes body as contentType says.
func ParsePayload(contentType string, body []byte) Payload {
	if strings.HasPrefix(contentType, "application/x-www-form-urlencoded") {
		if form, err := url.ParseQuery(string(body)); err == nil && form.Has("payload") {
			body = []byte(form.Get("payload"))
		}
	}
	p := Payload{raw: string(body)}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err == nil && !dec.More() {
		p.value = v
	}
	return p
}

// lookup is the value at path (".a.b"), or false.
func (p Payload) lookup(path string) (string, bool) {
	if path == "." {
		if p.value == nil {
			return p.raw, true
		}
		return text(p.value), true
	}
	v := p.value
	for _, seg := range strings.Split(strings.TrimPrefix(path, "."), ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[seg]; !ok {
				return "", false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return "", false
			}
			v = x[i]
		default:
			return "", false
		}
	}
	return text(v), true
}

// text is how a value is put in the description.
func text(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case nil:
		return "null"
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return ""
		}
		return string(b)
	}
}

// CheckTemplate says what is wrong with a description template, for the
// command line: a placeholder that reads nothing the syntax knows.
func CheckTemplate(tmpl string) error {
	if strings.TrimSpace(tmpl) == "" {
		return fmt.Errorf("the description is empty")
	}
	if n := utf8.RuneCountInString(tmpl); n > MaxDescription/2 {
		return fmt.Errorf("the description is %d characters; a template holds at most %d, to leave room for the payload", n, MaxDescription/2)
	}
	rest := placeholder.ReplaceAllString(tmpl, "")
	if i := strings.Index(rest, "{{"); i >= 0 && strings.Contains(rest[i:], "}}") {
		end := min(len(rest), i+40)
		return fmt.Errorf("%q is not a placeholder: write a path like {{.pull_request.title}}, or {{.}} for the whole body", rest[i:end])
	}
	return nil
}

// Render is the Task's description: UntrustedNotice (naming the Webhook
// who), then tmpl with each placeholder replaced by its value between the
// delimiters, at most MaxDescription characters.
func Render(tmpl, who string, p Payload) string {
	notice := fmt.Sprintf(UntrustedNotice, who) + "\n\n"
	locs := placeholder.FindAllStringSubmatchIndex(tmpl, -1)
	values := make([]string, len(locs))
	fixed := utf8.RuneCountInString(notice) + utf8.RuneCountInString(tmpl)
	for i, loc := range locs {
		v, _ := p.lookup(tmpl[loc[2]:loc[3]])
		values[i] = clean(v)
		fixed += utf8.RuneCountInString(UntrustedOpen+UntrustedClose) - utf8.RuneCountInString(tmpl[loc[0]:loc[1]])
	}
	// Each value gets an equal share of the room left, and a short value
	// leaves its unused share to those after it.
	room := MaxDescription - fixed
	var b strings.Builder
	b.WriteString(notice)
	last := 0
	for i, loc := range locs {
		b.WriteString(tmpl[last:loc[0]])
		share := max(0, room/(len(locs)-i))
		v := cut(values[i], share)
		room -= utf8.RuneCountInString(v)
		b.WriteString(UntrustedOpen)
		b.WriteString(v)
		b.WriteString(UntrustedClose)
		last = loc[1]
	}
	b.WriteString(tmpl[last:])
	out := b.String()
	if utf8.RuneCountInString(out) > MaxDescription {
		// Only a template longer than CheckTemplate allows gets here.
		out = string([]rune(out)[:MaxDescription])
	}
	return out
}

// markers finds the delimiters, whatever their case and spacing.
var markers = regexp.MustCompile(`(?i)<\s*/?\s*untrusted-input\s*>`)

// clean makes a sender's value storable (no NUL, UTF-8) and takes the
// delimiters out of it (again, until none is left: taking one out must not
// join the halves of another).
func clean(v string) string {
	v = pgtext.String(v)
	for markers.MatchString(v) {
		v = markers.ReplaceAllString(v, "")
	}
	return v
}

// cut shortens v to n characters, ending with cutNote when it cut.
func cut(v string, n int) string {
	if utf8.RuneCountInString(v) <= n {
		return v
	}
	keep := n - utf8.RuneCountInString(cutNote)
	if keep <= 0 {
		return string([]rune(cutNote)[:max(0, n)])
	}
	return string([]rune(v)[:keep]) + cutNote
}
