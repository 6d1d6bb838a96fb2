package controllers

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

// A Dot's coming or going wakes the objects bound to it by name in its own
// namespace, and none other.
func TestBoundToAreTheDotsOwnObjects(t *testing.T) {
	channel := func(ns, name, dot string) *dotsv1.Channel {
		return &dotsv1.Channel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: dotsv1.ChannelSpec{DotName: dot, Type: dotsv1.ChannelTelegram}}
	}
	c := clientfake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		channel("team-a", "helper-telegram", "helper"),
		channel("team-a", "helper-whatsapp", "helper"),
		channel("team-a", "other-telegram", "other"),
		channel("team-b", "helper-telegram", "helper"),
	).Build()
	dot := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "helper"}}
	got := boundTo(context.Background(), c, dot, &dotsv1.ChannelList{}, func(x client.Object) string { return x.(*dotsv1.Channel).Spec.DotName })
	var names []string
	for _, r := range got {
		names = append(names, r.Namespace+"/"+r.Name)
	}
	slices.Sort(names)
	if want := []string{"team-a/helper-telegram", "team-a/helper-whatsapp"}; !slices.Equal(names, want) {
		t.Errorf("bound to team-a/helper: %v, want %v", names, want)
	}
}
