// Package heartbeat registers a host agent's Host and keeps it current: the
// machine's capacity and what Computers may take of it, the accelerator and
// QEMU version, the images registered, the Ready and pressure conditions,
// and a coordination.k8s.io Lease renewed every few seconds (as a kubelet
// renews its node Lease). Only the Lease is written on every beat; the Host
// is written when what it says changed.
package heartbeat

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/patch"
	"github.com/invisible-dots/invisible-dots/internal/version"
)

// ControllerName names the heartbeat in errors and as the Host's writer.
const ControllerName = "host-heartbeat"

// writer owns the Host's conditions; the control plane's host lifecycle
// turns Ready Unknown when the Lease lapses, and the next beat writes it
// back.
var writer = patch.Writer{Name: ControllerName, Conditions: []string{
	dotsv1.ReadyCondition, dotsv1.DiskPressureCondition, dotsv1.MemoryPressureCondition,
}}

// What the host keeps for itself: Computers are placed within the rest.
const (
	ReservedMemory = int64(1) << 30
	ReservedDisk   = int64(5) << 30
)

// Facts are what the machine is, read at each beat.
type Facts struct {
	CPUs         int32
	MemTotal     int64
	MemAvailable int64
	// DiskTotal and DiskFree are of the home's filesystem.
	DiskTotal int64
	DiskFree  int64
	// Accelerator and QEMUVersion are empty when VMs cannot run here.
	Accelerator dotsv1.Accelerator
	QEMUVersion string
	Images      []driver.Image
	// WakeLead is host.yaml's wakeLead; 0 when it is not set.
	WakeLead time.Duration
	// GuestEndpoint is where the agent serves the guest routes; nil when
	// it serves none.
	GuestEndpoint *dotsv1.HostGuestEndpoint
	// Problem says why this host cannot run VMs (what the doctor found);
	// empty when it can.
	Problem string
	// FullWrite says which write in the home the disk refused for want of
	// space, when, and what to do; empty when none is remembered (none
	// failed, or one succeeded since, or space returned).
	FullWrite string
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=hosts,verbs=get;create
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=hosts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update

// Heartbeat is a manager Runnable: it registers the Host and beats until
// its context ends. Every host agent runs one; it needs no leader.
type Heartbeat struct {
	Client   client.Client
	Reader   client.Reader
	HostName string
	// Facts reads the machine; a test seam.
	Facts func(ctx context.Context) (Facts, error)
	Clock clock.PassiveClock
	Log   logr.Logger
	// Interval between beats; 10 s when zero (a quarter of the Lease).
	Interval time.Duration
	// Home is the host's home. Each beat writes a small probe file in it,
	// and a write there the disk refused (the probe's, or one of the
	// agent's: a VM's records, its overlay, an image) turns DiskPressure
	// True until a write succeeds or space returns. Empty: no probe.
	Home home.Layout
}

// beatTimeout bounds one beat: a few requests to the API server and a look
// at the machine, which take milliseconds. It only ends a beat whose API
// server does not answer.
const beatTimeout = 30 * time.Second

// NeedLeaderElection: every agent beats for its own host.
func (h *Heartbeat) NeedLeaderElection() bool { return false }

// Start beats until ctx ends. A beat that fails is logged and tried again
// at the next: the Lease lapsing is how the control plane learns of it.
func (h *Heartbeat) Start(ctx context.Context) error {
	if h.Clock == nil {
		h.Clock = clock.RealClock{}
	}
	interval := h.Interval
	if interval == 0 {
		interval = 10 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		// A beat under way when the agent stops is finished, not cut: its
		// requests would reach the API server cancelled half-way, which
		// the API server logs as errors of its own (a handler timeout).
		beatCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), beatTimeout)
		err := h.Beat(beatCtx)
		cancel()
		if err != nil && ctx.Err() == nil {
			h.Log.Error(err, "heartbeat failed; trying again", "host", h.HostName, "in", interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Beat renews the Lease and writes the Host's status when it changed.
func (h *Heartbeat) Beat(ctx context.Context) error {
	if err := h.renewLease(ctx); err != nil {
		return err
	}
	facts, err := h.Facts(ctx)
	if err != nil {
		return fmt.Errorf("read this machine's facts: %w", err)
	}
	if facts.FullWrite == "" && h.Home.Root != "" {
		facts.FullWrite = fullWrite(h.Home)
	}
	host := &dotsv1.Host{}
	err = h.Reader.Get(ctx, client.ObjectKey{Name: h.HostName}, host)
	if apierrors.IsNotFound(err) {
		host = &dotsv1.Host{ObjectMeta: metav1.ObjectMeta{Name: h.HostName}}
		if err := h.Client.Create(ctx, host); err != nil {
			return fmt.Errorf("register host %s: %w", h.HostName, err)
		}
		h.Log.Info("registered the host", "host", h.HostName)
	} else if err != nil {
		return fmt.Errorf("read host %s: %w", h.HostName, err)
	}
	helper := patch.NewHelper(h.Client, writer, host)
	setStatus(host, facts, h.Clock.Now())
	_, err = helper.Patch(ctx, host)
	if apierrors.IsConflict(err) {
		return nil // written meanwhile; the next beat computes again
	}
	return err
}

// setStatus computes the Host's status from the facts. Memory and disk are
// rounded down to whole GiB, so that the free space moving by a few bytes
// does not write the Host on every beat.
func setStatus(host *dotsv1.Host, f Facts, now time.Time) {
	st := &host.Status
	st.Capacity = dotsv1.HostResources{CPU: f.CPUs, Memory: gibFloor(f.MemTotal), Disk: gibFloor(f.DiskTotal)}
	st.Allocatable = dotsv1.HostResources{CPU: f.CPUs, Memory: gibFloor(f.MemTotal - ReservedMemory), Disk: gibFloor(f.DiskFree - ReservedDisk)}
	st.Accelerator = f.Accelerator
	st.QEMUVersion = f.QEMUVersion
	st.AgentVersion = version.Version
	st.GuestEndpoint = f.GuestEndpoint
	st.WakeLead = nil
	if f.WakeLead > 0 {
		st.WakeLead = &metav1.Duration{Duration: f.WakeLead}
	}
	st.Images = nil
	for _, img := range f.Images {
		st.Images = append(st.Images, dotsv1.HostImage{Kind: string(img.Kind), Version: img.Version})
	}
	slices.SortFunc(st.Images, func(a, b dotsv1.HostImage) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Version, b.Version))
	})
	if len(st.Images) > 64 {
		st.Images = st.Images[len(st.Images)-64:]
	}

	if f.Problem != "" {
		patch.SetCondition(host, now, dotsv1.ReadyCondition, metav1.ConditionFalse, dotsv1.NoQEMUReason, "this host cannot run VMs: "+f.Problem)
	} else {
		patch.SetCondition(host, now, dotsv1.ReadyCondition, metav1.ConditionTrue, dotsv1.HostReadyReason, fmt.Sprintf("the agent heartbeats and QEMU %s runs guests with %s", f.QEMUVersion, f.Accelerator))
	}
	needMem := int64(protocol.Bounds.MemoryGiB.Default) << 30
	needDisk := int64(protocol.Bounds.DiskGiB.Default) << 30
	pressure(host, now, dotsv1.MemoryPressureCondition, f.MemAvailable-ReservedMemory, needMem, "memory available")
	pressure(host, now, dotsv1.DiskPressureCondition, f.DiskFree-ReservedDisk, needDisk, "free space in the home's filesystem")
	if f.FullWrite != "" {
		// A write refused is pressure whatever the free space says: a
		// filesystem may count space it cannot give (reserved blocks, a
		// quota), and this is what a start or a registration met.
		patch.SetCondition(host, now, dotsv1.DiskPressureCondition, metav1.ConditionTrue, dotsv1.DiskFullReason, "the disk refused a write in the home for want of space: "+f.FullWrite)
	}
}

// fullWrite says which write in the home the disk refused last (one of the
// agent's that no write since has cleared, else a small probe write of its
// own), with what to do; empty when the disk takes writes.
func fullWrite(h home.Layout) string {
	w, ok := h.LastFullWrite()
	if !ok {
		// The probe's failure is remembered like the agent's writes; a
		// probe that passes clears nothing, since a write larger than it
		// (an overlay) may still fail: only a real write or space
		// returning does.
		if err := home.ProbeWrite(h.Root); home.DiskFull(err) {
			probe := h.Root
			var pe *fs.PathError
			if errors.As(err, &pe) {
				probe = pe.Path
			}
			h.NoteWrite(probe, err)
			w, ok = h.LastFullWrite()
		}
	}
	if !ok {
		return ""
	}
	return w.String() + "; fix: " + h.DiskFullFix()
}

// pressure sets a pressure condition: True when what is left is under what
// one more default Computer needs.
func pressure(host *dotsv1.Host, now time.Time, typ string, left, need int64, what string) {
	msg := fmt.Sprintf("%s %s (less the host's reserve), one more default Computer needs %s", gibText(left), what, gibText(need))
	if left < need {
		patch.SetCondition(host, now, typ, metav1.ConditionTrue, dotsv1.PressureReason, msg)
		return
	}
	patch.SetCondition(host, now, typ, metav1.ConditionFalse, dotsv1.NoPressureReason, msg)
}

// renewLease creates or renews the host's Lease.
func (h *Heartbeat) renewLease(ctx context.Context) error {
	now := metav1.NewMicroTime(h.Clock.Now())
	l := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: dotsv1.SystemNamespace, Name: h.HostName}
	err := h.Reader.Get(ctx, key, l)
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(h.HostName),
				LeaseDurationSeconds: ptr.To(int32(dotsv1.HostLeaseDuration)),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}
		if err := h.Client.Create(ctx, l); err != nil {
			return fmt.Errorf("create the Lease %s: %w (is the %s namespace there? kubectl apply -k config/default makes it)", key, err, dotsv1.SystemNamespace)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the Lease %s: %w", key, err)
	}
	l.Spec.RenewTime = &now
	l.Spec.LeaseDurationSeconds = ptr.To(int32(dotsv1.HostLeaseDuration))
	l.Spec.HolderIdentity = ptr.To(h.HostName)
	if err := h.Client.Update(ctx, l); err != nil {
		return fmt.Errorf("renew the Lease %s: %w", key, err)
	}
	return nil
}

func gibFloor(b int64) resource.Quantity {
	if b < 0 {
		b = 0
	}
	return *resource.NewQuantity(b>>30<<30, resource.BinarySI)
}

// gibText prints whole GiB, rounded down: a message that moved with every
// byte would write the Host on every beat.
func gibText(b int64) string {
	if b < 0 {
		b = 0
	}
	return fmt.Sprintf("%d GiB", b>>30)
}
