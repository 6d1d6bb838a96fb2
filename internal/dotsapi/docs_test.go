package dotsapi

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// docs/api.md documents every route, the OpenAI-compatible endpoint's
// too, each under a heading "### METHOD PATH", and no route that is not
// served: it cannot drift from the routes.
func TestEveryRouteIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^### ([A-Z]+ /(?:dots/)?v1/\S*)\s*$`).FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(documented)
	served := append(Routes(), OpenAIRoutes()...)
	slices.Sort(served)
	if diff := cmp.Diff(served, documented); diff != "" {
		t.Errorf("docs/api.md's routes differ from the served ones (-served +documented):\n%s", diff)
	}
}
