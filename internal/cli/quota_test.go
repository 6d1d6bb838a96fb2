package cli

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func TestApplyQuotaFlags(t *testing.T) {
	tests := map[string]struct {
		reason            string
		start             dotsv1.DotQuotaSpec
		setActive, setDay bool
		active, perDay    string
		want              dotsv1.DotQuotaSpec
		wantErr           bool
	}{
		"Both":      {reason: "both caps set", setActive: true, active: "4", setDay: true, perDay: "$12.50", want: dotsv1.DotQuotaSpec{ActiveDots: ptr.To[int32](4), SpendPerDayUSD: ptr.To("12.50")}},
		"None":      {reason: "none lifts a cap, the other stays", start: dotsv1.DotQuotaSpec{ActiveDots: ptr.To[int32](2), SpendPerDayUSD: ptr.To("5")}, setActive: true, active: "none", want: dotsv1.DotQuotaSpec{SpendPerDayUSD: ptr.To("5")}},
		"Negative":  {reason: "a negative count is refused", setActive: true, active: "-1", wantErr: true},
		"NotAMoney": {reason: "spend must be dollars", setDay: true, perDay: "ten", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := tc.start
			err := applyQuotaFlags(&got, tc.setActive, tc.active, tc.setDay, tc.perDay)
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: error %v, want error %v", tc.reason, err, tc.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
				}
			}
		})
	}
}

func TestPrintQuota(t *testing.T) {
	q := &dotsv1.DotQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "default"},
		Spec:       dotsv1.DotQuotaSpec{ActiveDots: ptr.To[int32](4), SpendPerDayUSD: ptr.To("10")},
		Status:     dotsv1.DotQuotaStatus{ActiveDots: 3, Admitted: []string{"a", "b", "c"}, Day: "2026-12-05", SpentTodayUSD: "2.50"},
	}
	var b bytes.Buffer
	printQuota(&b, q)
	want := `DotQuota team-a/default
  active Dots:   3 of 4
  admitted:      a, b, c
  spent 2026-12-05: $2.50 of $10
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printQuota (-want +got):\n%s", diff)
	}
}
