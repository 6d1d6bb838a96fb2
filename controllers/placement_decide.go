package controllers

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// placementRequest is what a Computer needs of a host.
type placementRequest struct {
	CPU         int32
	MemoryBytes int64
	DiskBytes   int64
	// GoldenImage and RuntimeImage are versions the spec names; empty takes
	// any registered image of the kind.
	GoldenImage  string
	RuntimeImage string
}

// hostFacts is what placement knows of one host: its Host object and the
// Computers already placed on it. Nothing in it is fetched by decidePlacement.
type hostFacts struct {
	Name          string
	Ready         bool
	NotReadyWhy   string
	Unschedulable bool
	Allocatable   resources
	Images        []dotsv1.HostImage
	// RunningMemoryBytes is the memory of its Computers whose VM runs (or
	// is starting or stopping): a sleeping VM holds no memory. Sleeping VMs
	// that all wake at once can run a host short; its MemoryPressure
	// condition shows that, and nothing refuses the wake today.
	RunningMemoryBytes int64
	// Computers counts the Computers placed on it.
	Computers int
}

// resources are amounts in plain units.
type resources struct {
	CPU         int32
	MemoryBytes int64
	DiskBytes   int64
}

// placement is the decision: a host, or why none fits.
type placement struct {
	Host string
	// Why says, host by host, why none fits (NoHostFits' message).
	Why string
}

// decidePlacement picks the host for a new Computer among the Ready,
// schedulable hosts that have its images and the room for it: the least
// loaded (the smallest share of its allocatable memory taken by running VMs
// once this one runs too), then the one with fewer Computers, then by name,
// so the choice is the same every time for the same facts. It is a pure
// function; the table test covers it.
//
// Room: the Computer's processors at most the host's (vCPUs are time-shared,
// one VM cannot have more than the host); its memory within what running
// VMs leave of the allocatable memory; its disk within the home
// filesystem's free space (a thin overlay grows up to its size).
func decidePlacement(req placementRequest, hosts []hostFacts) placement {
	if len(hosts) == 0 {
		return placement{Why: "no host is registered: run invisible-dots server on a machine with QEMU, or join one with invisible-dots host join and invisible-dots agent"}
	}
	type fit struct {
		h    hostFacts
		load float64
	}
	var fits []fit
	var why []string
	for _, h := range hosts {
		if reason := misfit(req, h); reason != "" {
			why = append(why, "host "+h.Name+" "+reason)
			continue
		}
		load := 1.0
		if h.Allocatable.MemoryBytes > 0 {
			load = float64(h.RunningMemoryBytes+req.MemoryBytes) / float64(h.Allocatable.MemoryBytes)
		}
		fits = append(fits, fit{h, load})
	}
	if len(fits) == 0 {
		slices.Sort(why)
		return placement{Why: "no host fits: " + strings.Join(why, "; ")}
	}
	best := slices.MinFunc(fits, func(a, b fit) int {
		return cmp.Or(cmp.Compare(a.load, b.load), cmp.Compare(a.h.Computers, b.h.Computers), cmp.Compare(a.h.Name, b.h.Name))
	})
	return placement{Host: best.h.Name}
}

// misfit says why h cannot take the Computer, or "" when it can.
func misfit(req placementRequest, h hostFacts) string {
	switch {
	case !h.Ready:
		return "is not Ready (" + cmp.Or(h.NotReadyWhy, "its agent has not reported") + ")"
	case h.Unschedulable:
		return "is unschedulable (spec.unschedulable)"
	}
	if m := missingImage(h.Images, "golden", req.GoldenImage); m != "" {
		return m
	}
	if m := missingImage(h.Images, "runtime", req.RuntimeImage); m != "" {
		return m
	}
	if req.CPU > h.Allocatable.CPU {
		return fmt.Sprintf("has %d processors, the Computer needs %d", h.Allocatable.CPU, req.CPU)
	}
	if free := h.Allocatable.MemoryBytes - h.RunningMemoryBytes; req.MemoryBytes > free {
		return fmt.Sprintf("has %s of memory free, the Computer needs %s", gib(free), gib(req.MemoryBytes))
	}
	if req.DiskBytes > h.Allocatable.DiskBytes {
		return fmt.Sprintf("has %s of disk free, the Computer needs %s", gib(h.Allocatable.DiskBytes), gib(req.DiskBytes))
	}
	return ""
}

// missingImage says what image of kind the host lacks: the version named,
// or any when none is named.
func missingImage(imgs []dotsv1.HostImage, kind, version string) string {
	for _, i := range imgs {
		if i.Kind == kind && (version == "" || i.Version == version) {
			return ""
		}
	}
	if version != "" {
		return fmt.Sprintf("has no %s image %s", kind, version)
	}
	fix := "invisible-dots image build"
	if kind == "runtime" {
		fix = "invisible-dots image build, or make test-image"
	}
	return fmt.Sprintf("has no %s image registered (%s)", kind, fix)
}

// gib prints bytes as GiB with one decimal, "3.1 GiB".
func gib(b int64) string {
	if b < 0 {
		b = 0
	}
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}
