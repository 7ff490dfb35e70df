package tools

import (
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
)

// An image the engine is building (serve --build-images) is neither built
// nor missing: a job on it is refused with a word to try again, not to run
// `make images`, and list_languages shows it as building.
func TestImageBeingBuilt(t *testing.T) {
	pol := policy.Default()
	languages := lang.NewRegistry(pol.Image, nil)
	rt := fake.New("test")
	_, pyImage, _ := languages.Lookup("python")
	_, goImage, _ := languages.Lookup("go")
	rt.SetImageMissing("sandboxer/*", true)
	rt.SetImageBuilding(pyImage, true)
	d := Deps{Policy: pol, Languages: languages, Runtime: rt}

	problem := d.checkImage(t.Context(), pyImage)
	if problem == nil || !problem.IsError || !strings.Contains(resultText(problem), "is being built") || strings.Contains(resultText(problem), "make images") {
		t.Errorf("a job on an image being built: %v, want an error that says it is being built", problem)
	}
	problem = d.checkImage(t.Context(), goImage)
	if problem == nil || !strings.Contains(resultText(problem), "is not built: run `make images`") {
		t.Errorf("a job on a missing image: %v, want the make images error", problem)
	}

	res, err := ListLanguages(d).Handler(t.Context(), mcp.CallToolRequest{})
	if err != nil || res.IsError {
		t.Fatalf("list_languages: %v %v", err, res)
	}
	out := res.StructuredContent.(ListLanguagesResult)
	seen := 0
	for _, l := range out.Languages {
		switch l.Image {
		case pyImage:
			seen++
			if l.Built || !l.Building {
				t.Errorf("%s: built %v building %v, want building", l.Name, l.Built, l.Building)
			}
		case goImage:
			seen++
			if l.Built || l.Building {
				t.Errorf("%s: built %v building %v, want neither", l.Name, l.Built, l.Building)
			}
		}
	}
	text := resultText(res)
	if seen != 2 || !strings.Contains(text, "building (minutes)") || !strings.Contains(text, "not built (make images)") {
		t.Errorf("list_languages text:\n%s", text)
	}

	rt.SetImageBuilding(pyImage, false)
	rt.SetImageMissing(pyImage, false)
	if problem := d.checkImage(t.Context(), pyImage); problem != nil {
		t.Errorf("once built: %v", resultText(problem))
	}
}
