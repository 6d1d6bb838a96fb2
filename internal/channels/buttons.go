package channels

import (
	"fmt"
	"strings"
)

// An approval prompt's buttons carry "ap1:y:ID" (approve) or "ap1:n:ID"
// (reject): versioned, so data of another version is told apart from a
// forgery, and within Telegram's 64 bytes, checked when the prompt is made
// and again when a press is read. The data proves nothing: the hub checks
// the approval is its Dot's and still asked.
const (
	buttonVersion   = "ap1"
	maxCallbackData = 64
)

// ButtonData is a button's data for an answer to approval id.
func ButtonData(approve bool, id string) (string, error) {
	d := "n"
	if approve {
		d = "y"
	}
	data := buttonVersion + ":" + d + ":" + id
	if id == "" || strings.ContainsAny(id, ": \n") || len(data) > maxCallbackData {
		return "", fmt.Errorf("approval %q cannot be named in a button (at most %d bytes of data, no colon or space)", id, maxCallbackData)
	}
	return data, nil
}

// ParseButtonData reads a press, strictly: ok is false for data of another
// version or shape, which the person is told is out of date.
func ParseButtonData(data string) (approve bool, id string, ok bool) {
	if len(data) > maxCallbackData {
		return false, "", false
	}
	parts := strings.Split(data, ":")
	if len(parts) != 3 || parts[0] != buttonVersion || parts[2] == "" || strings.ContainsAny(parts[2], " \n") {
		return false, "", false
	}
	switch parts[1] {
	case "y":
		return true, parts[2], true
	case "n":
		return false, parts[2], true
	}
	return false, "", false
}
