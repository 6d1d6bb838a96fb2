package agent

import "testing"

func TestValidateHostName(t *testing.T) {
	for name, ok := range map[string]bool{
		"host-a": true, "a": true, "box2": true,
		"": false, "-a": false, "a-": false, "Host": false, "a.b": false, "a_b": false,
		"x23456789012345678901234567890123456789012345678901234567890123":  true,
		"x234567890123456789012345678901234567890123456789012345678901234": false,
	} {
		if err := ValidateHostName(name); (err == nil) != ok {
			t.Errorf("ValidateHostName(%q) = %v; want ok %v", name, err, ok)
		}
	}
}

func TestDefaultHostNameIsALabel(t *testing.T) {
	name, err := DefaultHostName()
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateHostName(name); err != nil {
		t.Errorf("DefaultHostName() = %q: %v", name, err)
	}
}
