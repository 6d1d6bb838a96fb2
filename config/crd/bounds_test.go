package crd_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/invisible-dots/invisible-dots/config/crd"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// The CRD markers repeat CONFIG_BOUNDS because a marker cannot name a Go
// constant. These tests read the generated CRDs back and fail when a number,
// a permission name or a model role differs from guest/protocol's one table.

func loadSchema(t *testing.T, file string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	data, err := crd.Bases.ReadFile("bases/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var c apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return *c.Spec.Versions[0].Schema.OpenAPIV3Schema
}

func at(s apiextensionsv1.JSONSchemaProps, path ...string) apiextensionsv1.JSONSchemaProps {
	for _, p := range path {
		s = s.Properties[p]
	}
	return s
}

func TestBoundsMatchTheTable(t *testing.T) {
	dot := loadSchema(t, "dots.invisible.dev_dots.yaml")
	computer := loadSchema(t, "dots.invisible.dev_computers.yaml")
	b := protocol.Bounds
	type minMax struct{ Min, Max, Default string }
	num := func(s apiextensionsv1.JSONSchemaProps) minMax {
		var m minMax
		if s.Minimum != nil {
			m.Min = fmt.Sprint(*s.Minimum)
		}
		if s.Maximum != nil {
			m.Max = fmt.Sprint(*s.Maximum)
		}
		if s.Default != nil {
			m.Default = strings.Trim(string(s.Default.Raw), `"`)
		}
		return m
	}
	// The MCP timeouts are optional: no default in the CRD, the guest applies it.
	noDefault := func(m minMax) minMax { m.Default = ""; return m }
	ints := func(r protocol.IntRange) minMax {
		return minMax{fmt.Sprint(r.Min), fmt.Sprint(r.Max), fmt.Sprint(r.Default)}
	}
	cases := map[string]struct {
		got, want minMax
	}{
		"dot cpu":             {num(at(dot, "spec", "computer", "cpu")), ints(b.CPU)},
		"computer cpu":        {num(at(computer, "spec", "cpu")), ints(b.CPU)},
		"maxStepsPerTask":     {num(at(dot, "spec", "limits", "maxStepsPerTask")), ints(b.MaxStepsPerTask)},
		"maxCostPerTaskUSD":   {num(at(dot, "spec", "limits", "maxCostPerTaskUSD")), minMax{fmt.Sprint(b.MaxCostPerTaskUSD.Min), fmt.Sprint(b.MaxCostPerTaskUSD.Max), fmt.Sprint(b.MaxCostPerTaskUSD.Default)}},
		"mcp timeout":         {noDefault(num(at(dot, "spec", "mcpServers").Items.Schema.Properties["timeoutSeconds"])), noDefault(ints(b.MCPTimeoutS))},
		"mcp startup timeout": {noDefault(num(at(dot, "spec", "mcpServers").Items.Schema.Properties["startupTimeoutSeconds"])), noDefault(ints(b.MCPStartupTimeoutS))},
		"memory default":      {minMax{Default: num(at(dot, "spec", "computer", "memory")).Default}, minMax{Default: fmt.Sprintf("%dGi", b.MemoryGiB.Default)}},
		"disk default":        {minMax{Default: num(at(dot, "spec", "computer", "disk")).Default}, minMax{Default: fmt.Sprintf("%dGi", b.DiskGiB.Default)}},
		"idleTimeout default": {minMax{Default: num(at(dot, "spec", "computer", "idleTimeout")).Default}, minMax{Default: strings.TrimSuffix(b.IdleTimeoutDefault.String(), "0s")}},
	}
	for name, c := range cases {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s: the CRD differs from protocol.Bounds (-table +crd):\n%s", name, diff)
		}
	}

	// The quantity ranges live in CEL rules.
	rules := ""
	for _, v := range at(dot, "spec", "computer").XValidations {
		rules += v.Rule + "\n"
	}
	for _, want := range []string{
		fmt.Sprintf("quantity('%dGi')) >= 0", b.MemoryGiB.Min), fmt.Sprintf("quantity('%dGi')) <= 0", b.MemoryGiB.Max),
		fmt.Sprintf("quantity('%dGi')) >= 0", b.DiskGiB.Min), fmt.Sprintf("quantity('%dGi')) <= 0", b.DiskGiB.Max),
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("spec.computer's CEL rules do not contain %q:\n%s", want, rules)
		}
	}
	if got := at(dot, "spec", "mcpServers").Items.Schema.Properties["name"].Pattern; got != protocol.MCPServerNamePattern {
		t.Errorf("mcpServers[].name pattern = %q, want protocol.MCPServerNamePattern %q", got, protocol.MCPServerNamePattern)
	}
}

func TestPermissionNamesMatchTheTable(t *testing.T) {
	dot := loadSchema(t, "dots.invisible.dev_dots.yaml")
	var want []string
	for _, p := range protocol.Permissions {
		want = append(want, p.Name)
	}
	sort.Strings(want)
	quoted := regexp.MustCompile(`'([a-z.]+)'`)
	for _, v := range at(dot, "spec", "permissions").XValidations {
		for _, expr := range []string{v.Rule, v.MessageExpression} {
			list := expr[strings.Index(expr, "["):strings.Index(expr, "]")]
			var got []string
			for _, m := range quoted.FindAllStringSubmatch(list, -1) {
				got = append(got, m[1])
			}
			sort.Strings(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the permission names of a CEL expression differ from protocol.Permissions (-table +crd):\n%s\n%s", diff, expr)
			}
		}
	}
	models := at(dot, "spec", "models").XValidations
	if len(models) != 1 || len(protocol.ModelRoles) != 1 || !strings.Contains(models[0].Rule, "'"+protocol.ModelRoles[0]+"'") {
		t.Errorf("spec.models' rule %v does not name exactly the roles %v", models, protocol.ModelRoles)
	}
}

// TestNameRuleMatchesTheTable: a Dot's name rule, and the dotName of Tasks
// and Approvals that point at a Dot, are protocol.NamePattern.
func TestNameRuleMatchesTheTable(t *testing.T) {
	for _, file := range []string{"dots.invisible.dev_tasks.yaml", "dots.invisible.dev_approvals.yaml"} {
		if got := at(loadSchema(t, file), "spec", "dotName").Pattern; got != protocol.NamePattern {
			t.Errorf("%s spec.dotName pattern = %q, want protocol.NamePattern %q", file, got, protocol.NamePattern)
		}
	}
	found := false
	for _, v := range loadSchema(t, "dots.invisible.dev_dots.yaml").XValidations {
		if strings.Contains(v.Rule, "self.metadata.name.matches('"+protocol.NamePattern+"')") {
			found = true
		}
	}
	if !found {
		t.Errorf("the Dot's CEL rules do not match metadata.name against protocol.NamePattern %q", protocol.NamePattern)
	}
}
