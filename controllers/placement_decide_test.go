package controllers

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

const gi = int64(1) << 30

var bothImages = []dotsv1.HostImage{{Kind: "golden", Version: "g1"}, {Kind: "runtime", Version: "r1"}}

func readyHost(name string, memGiB, diskGiB int64) hostFacts {
	return hostFacts{Name: name, Ready: true, Images: bothImages,
		Allocatable: resources{CPU: 8, MemoryBytes: memGiB * gi, DiskBytes: diskGiB * gi}}
}

func TestDecidePlacement(t *testing.T) {
	def := placementRequest{CPU: 2, MemoryBytes: 4 * gi, DiskBytes: 40 * gi}
	busy := readyHost("a", 16, 100)
	busy.RunningMemoryBytes = 8 * gi
	idle := readyHost("b", 16, 100)
	full := readyHost("a", 8, 100)
	full.RunningMemoryBytes = 8*gi - gi*9/10 // 0.9 GiB free
	notReady := readyHost("c", 64, 500)
	notReady.Ready, notReady.NotReadyWhy = false, "its Lease lapsed"
	cordoned := readyHost("d", 64, 500)
	cordoned.Unschedulable = true
	noImages := readyHost("e", 64, 500)
	noImages.Images = nil
	fewer := readyHost("b", 16, 100)
	fewer.Computers = 1
	more := readyHost("a", 16, 100)
	more.Computers = 3
	small := readyHost("s", 16, 30)

	cases := map[string]struct {
		reason  string
		req     placementRequest
		hosts   []hostFacts
		want    string
		wantWhy []string // substrings of Why
	}{
		"one host that fits": {
			reason: "with one host it is that host",
			req:    def, hosts: []hostFacts{idle}, want: "b",
		},
		"least loaded": {
			reason: "b runs nothing, a runs 8 GiB of 16",
			req:    def, hosts: []hostFacts{busy, idle}, want: "b",
		},
		"tie by count then name": {
			reason: "equal load: the host with fewer Computers",
			req:    def, hosts: []hostFacts{more, fewer}, want: "b",
		},
		"tie by name": {
			reason: "equal in everything: the first by name, the same every time",
			req:    def, hosts: []hostFacts{readyHost("z", 16, 100), readyHost("m", 16, 100)}, want: "m",
		},
		"no host": {
			reason: "nothing registered says how to get a host",
			req:    def, hosts: nil,
			wantWhy: []string{"no host is registered", "invisible-dots host join"},
		},
		"memory short": {
			reason: "the message names the host, its free memory and the need",
			req:    def, hosts: []hostFacts{full},
			wantWhy: []string{"no host fits: host a has 0.9 GiB of memory free, the Computer needs 4.0 GiB"},
		},
		"disk short": {
			reason: "a 40 GiB disk does not fit in 30 GiB free",
			req:    def, hosts: []hostFacts{small},
			wantWhy: []string{"host s has 30.0 GiB of disk free, the Computer needs 40.0 GiB"},
		},
		"too many processors": {
			reason: "one VM cannot have more processors than its host",
			req:    placementRequest{CPU: 16, MemoryBytes: gi}, hosts: []hostFacts{idle},
			wantWhy: []string{"host b has 8 processors, the Computer needs 16"},
		},
		"skips not ready, cordoned and imageless": {
			reason: "only a Ready, schedulable host with both images takes it",
			req:    def, hosts: []hostFacts{notReady, cordoned, noImages, busy}, want: "a",
		},
		"every host unfit says each": {
			reason: "one clause per host, sorted",
			req:    def, hosts: []hostFacts{noImages, notReady, cordoned},
			wantWhy: []string{
				"host c is not Ready (its Lease lapsed)",
				"host d is unschedulable",
				"host e has no golden image registered",
			},
		},
		"named image version": {
			reason: "a version the spec names must be registered on the host",
			req:    placementRequest{CPU: 1, MemoryBytes: gi, GoldenImage: "g2"}, hosts: []hostFacts{idle},
			wantWhy: []string{"host b has no golden image g2"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := decidePlacement(tc.req, tc.hosts)
			if diff := cmp.Diff(tc.want, got.Host); diff != "" {
				t.Errorf("%s\nhost (-want +got):\n%s\nwhy: %s", tc.reason, diff, got.Why)
			}
			for _, w := range tc.wantWhy {
				if !strings.Contains(got.Why, w) {
					t.Errorf("%s\nwhy = %q, want it to contain %q", tc.reason, got.Why, w)
				}
			}
			if tc.want == "" && got.Why == "" {
				t.Errorf("%s\nno host and no reason", tc.reason)
			}
		})
	}
}
