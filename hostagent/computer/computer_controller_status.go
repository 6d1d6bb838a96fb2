package computer

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/prober"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// maxTail bounds the QEMU log tail quoted in conditions and Events.
const maxTail = 800

// recordStartFailure counts one more failed start and sets when the next
// may run (the crash-loop backoff).
func (r *Reconciler) recordStartFailure(c *dotsv1.Computer, msg string) {
	f := c.Status.StartFailure
	if f == nil {
		f = &dotsv1.StartFailure{}
	}
	f.ConsecutiveFailCount++
	t := metav1.NewTime(r.Clock.Now().Add(startBackoff(f.ConsecutiveFailCount, r.Jitter())))
	f.RetryAfter = &t
	f.Message = msg
	c.Status.StartFailure = f
}

// diskFullRetry is how long a start the disk refused waits before it is
// tried again: a try costs a qemu-img create, and work goes on within this of
// the space returning.
const diskFullRetry = 10 * time.Second

// diskFullText begins the startFailure message of a start the host's disk
// refused; startFailedReason tells such a failure by it.
const diskFullText = "the host's disk is full, so the VM cannot start: "

// recordDiskFull records a start that failed because the host's disk is full
// (the driver could not write the VM's overlay, seed or records). It is not
// counted as a crash: the VM did nothing wrong, and counting it would fail
// the Dot's tasks after three tries (the dispatch controller gives a task up on
// ConsecutiveFailCount) while the disk is the host's to clear. The count
// stays, the start is tried again every diskFullRetry, and the Dot's work
// goes on once there is room; the Ready condition (DiskFull) and the Host's
// DiskPressure say what to free meanwhile.
func (r *Reconciler) recordDiskFull(c *dotsv1.Computer, err error) {
	f := c.Status.StartFailure
	if f == nil {
		f = &dotsv1.StartFailure{}
	}
	t := metav1.NewTime(r.Clock.Now().Add(diskFullRetry))
	f.RetryAfter = &t
	f.Message = diskFullText + err.Error()
	c.Status.StartFailure = f
}

// startFailedReason is the reason of a Ready condition that reports the last
// failed start.
func startFailedReason(f *dotsv1.StartFailure) string {
	if f != nil && strings.HasPrefix(f.Message, diskFullText) {
		return dotsv1.DiskFullReason
	}
	return dotsv1.StartFailedReason
}

// updateStatus computes state, the observed fields, stopReason,
// startFailure and the conditions from the scope. It is the one place a
// Computer's status is set (the deferred patch writes it).
func (r *Reconciler) updateStatus(s *scope, reconciled bool) {
	c := s.computer
	st := &c.Status
	now := r.Clock.Now()
	gen := c.Generation
	d := s.decision
	obs := s.obs
	ready := func(status metav1.ConditionStatus, reason, msg string) {
		patch.SetCondition(c, now, dotsv1.ReadyCondition, status, reason, msg)
	}

	if !c.DeletionTimestamp.IsZero() {
		st.State = dotsv1.ComputerDeleting
		msg := "the VM and its files are being destroyed"
		switch {
		case errors.Is(s.deleteErr, errWaitingForDotToLeaveReady):
			msg = "the Dot leaves READY, then the VM and its files are destroyed"
		case s.deleteErr != nil:
			msg = "the VM cannot be destroyed: " + s.deleteErr.Error()
		}
		ready(metav1.ConditionFalse, dotsv1.DeletingReason, msg)
		return
	}
	if !s.observed {
		reason, msg := dotsv1.NotReadyReason, "the Computer has not been observed on the host yet"
		switch {
		case r.Driver == nil:
			reason, msg = dotsv1.NoQEMUReason, s.observeErr.Error()+" (invisible-dots doctor on that host says what is missing)"
			if st.State == "" {
				st.State = dotsv1.ComputerProvisioning
			}
		case s.observeErr != nil:
			msg = "the host could not be read: " + s.observeErr.Error()
		}
		ready(metav1.ConditionFalse, reason, msg)
		return
	}

	// Requests consumed by a successful action (or made moot) are recorded
	// so they run once.
	if s.actErr == nil {
		if d.StartHandled {
			st.HandledStartRequest = c.Annotations[dotsv1.StartRequestedAnnotation]
		}
		if d.RebootHandled {
			st.HandledRebootRequest = c.Annotations[dotsv1.RebootRequestedAnnotation]
		}
		if d.SleepHandled {
			st.HandledSleepRequest = c.Annotations[dotsv1.SleepRequestedAnnotation]
		}
	}
	if obs.GoldenImage != "" {
		st.GoldenImage = obs.GoldenImage
	}
	if obs.RuntimeImage != "" {
		st.RuntimeImage = obs.RuntimeImage
	}

	// A failed start was counted in startFailure where it happened.
	startFailed := s.acted == actStart && s.actErr != nil

	switch {
	case obs.State == driver.Error:
		st.State = dotsv1.ComputerError
		st.PID, st.GuestPort = int32(obs.PID), int32(obs.GuestPort)
		ready(metav1.ConditionFalse, dotsv1.VMErrorReason, obs.Problem+logSuffix(obs.LogTail))

	case obs.State == driver.Running && st.StopDeadline != nil:
		// Asked to power off (or killed, and not gone yet).
		st.PID, st.GuestPort = int32(obs.PID), int32(obs.GuestPort)
		st.HostBootID = obs.Boot.BootID
		st.State = dotsv1.ComputerStopping
		st.StopReason = d.StopReason
		switch {
		case d.KillOverdue:
			// Ref 3.4: a QEMU that outlives SIGKILL for 10 s is an error of
			// the host (a process stuck in the kernel), said with its
			// reason; the kill is tried again and the stop ends when it goes.
			st.State = dotsv1.ComputerError
			ready(metav1.ConditionFalse, dotsv1.VMErrorReason, fmt.Sprintf("QEMU pid %d was killed (SIGKILL) at %s and has not exited %s later: it is stuck in the kernel (check `ps -o pid,stat,wchan -p %d`; state D is uninterruptible I/O); the kill is tried again",
				obs.PID, st.StopDeadline.UTC().Format(time.RFC3339), killWait, obs.PID)+poweroffNote(s.poweroffErr))
		case st.PoweroffTime == nil && s.preparing:
			ready(metav1.ConditionFalse, dotsv1.VMStoppingReason, fmt.Sprintf("going to sleep: the engine prepares (it saves its state and closes its browsers, up to %s), then the guest powers off", prepareSleepCall))
		case st.PoweroffTime == nil:
			ready(metav1.ConditionFalse, dotsv1.VMStoppingReason, leavingReadyText(d.StopReason))
		case s.actErr != nil:
			ready(metav1.ConditionFalse, dotsv1.VMStoppingReason, "the kill failed and QEMU still runs: "+s.actErr.Error())
		case s.acted == actKill || st.StopDeadline.Time.Before(now) || st.StopDeadline.Time.Equal(now):
			ready(metav1.ConditionFalse, dotsv1.VMStoppingReason, "QEMU was killed and has not exited yet"+poweroffNote(s.poweroffErr))
		default:
			ready(metav1.ConditionFalse, dotsv1.VMStoppingReason, "the guest was asked to power off; it is killed at "+st.StopDeadline.UTC().Format(time.RFC3339)+" if it has not")
		}

	case obs.State == driver.Running:
		st.PID, st.GuestPort = int32(obs.PID), int32(obs.GuestPort)
		st.HostBootID = obs.Boot.BootID
		st.StopReason = ""
		switch {
		case s.healthErr == nil && s.healthAsked:
			st.State = dotsv1.ComputerRunning
			st.StartFailure = nil
			ready(metav1.ConditionTrue, dotsv1.ReadyReason, fmt.Sprintf("QEMU pid %d runs and dot-agentd answers on 127.0.0.1:%d", obs.PID, obs.GuestPort)+shapeNote(c, obs))
		case s.prev.State == dotsv1.ComputerRunning && s.acted == actNone && errors.Is(s.healthErr, prober.ErrNotProbed):
			// It was up, and the prober has not probed it yet (a restarted
			// agent): Ready stays as it was until the first probe says.
			st.State = dotsv1.ComputerRunning
		case s.prev.State == dotsv1.ComputerRunning && s.acted == actNone:
			// It was up: a guest that stops answering is not a start.
			st.State = dotsv1.ComputerRunning
			ready(metav1.ConditionFalse, dotsv1.GuestNotAnsweringReason, "QEMU runs but dot-agentd does not answer GET /v1/health: "+errText(s.healthErr))
		case startCounted(c, obs):
			st.State = dotsv1.ComputerStarting
			ready(metav1.ConditionFalse, startFailedReason(st.StartFailure), st.StartFailure.Message+retryText(st.StartFailure))
		default:
			st.State = dotsv1.ComputerStarting
			ready(metav1.ConditionFalse, dotsv1.VMStartingReason, "QEMU runs; waiting for dot-agentd to answer GET /v1/health through the proven channel: "+errText(s.healthErr))
		}

	default: // Stopped
		st.PID, st.GuestPort = 0, 0
		st.StopDeadline, st.PoweroffTime = nil, nil
		st.StopReason = d.StopReason
		if s.acted == actStart {
			// A start that failed leaves the reason it had.
			st.StopReason = s.prev.StopReason
			if d.ExitedUnasked {
				st.StopReason = dotsv1.StopExited
			}
		}
		if st.StopReason != "" || obs.Provisioned {
			st.State = dotsv1.ComputerStopped
		} else {
			st.State = dotsv1.ComputerProvisioning
		}
		switch {
		case startFailed || d.NeverListened:
			ready(metav1.ConditionFalse, startFailedReason(st.StartFailure), st.StartFailure.Message+retryText(st.StartFailure))
		case d.Wait > 0 && st.StartFailure != nil:
			ready(metav1.ConditionFalse, startFailedReason(st.StartFailure), st.StartFailure.Message+retryText(st.StartFailure))
		default:
			ready(metav1.ConditionFalse, dotsv1.VMStoppedReason, stoppedText(st.StopReason, c.Spec.RunStrategy))
		}
	}

	switch {
	case obs.Provisioned:
		patch.SetCondition(c, now, dotsv1.ProvisionedCondition, metav1.ConditionTrue, dotsv1.ProvisionedReason, "the VM's disk exists on host "+r.HostName)
	case st.StartFailure != nil:
		// The last start failed before the disk existed; the backoff holds
		// the next one.
		reason := dotsv1.ProvisionFailedReason
		if startFailedReason(st.StartFailure) == dotsv1.DiskFullReason {
			reason = dotsv1.DiskFullReason
		}
		patch.SetCondition(c, now, dotsv1.ProvisionedCondition, metav1.ConditionFalse, reason, st.StartFailure.Message)
	default:
		patch.SetCondition(c, now, dotsv1.ProvisionedCondition, metav1.ConditionFalse, dotsv1.ProvisionPendingReason, "the VM's disk is made at its first start")
	}
	r.setRuntimeCurrent(s, now)
	if reconciled {
		st.ObservedGeneration = gen
	}
}

// setRuntimeCurrent records the runtime version the guest reports and says
// whether the VM runs the newest runtime ISO of its host (ref 3.3): a
// Computer starts on the newest one, and one that runs an older one says so,
// with the command that applies it, until it is restarted. The condition is
// only of a VM that runs; the guest's report only of a guest that answers.
func (r *Reconciler) setRuntimeCurrent(s *scope, now time.Time) {
	c := s.computer
	st := &c.Status
	if st.State != dotsv1.ComputerRunning && st.State != dotsv1.ComputerStarting {
		st.System = nil
		conds := c.GetConditions()
		meta.RemoveStatusCondition(&conds, dotsv1.RuntimeCurrentCondition)
		c.SetConditions(conds)
		return
	}
	if s.healthAsked && s.healthErr == nil {
		if s.health.RuntimeVersion == "" {
			st.System = nil
		} else {
			st.System = &dotsv1.GuestSystem{RuntimeVersion: s.health.RuntimeVersion}
		}
	}
	running := s.obs.RuntimeImage
	set := func(status metav1.ConditionStatus, reason, msg string) {
		patch.SetCondition(c, now, dotsv1.RuntimeCurrentCondition, status, reason, msg)
	}
	switch {
	case running == "":
	case c.Spec.RuntimeImage != "":
		set(metav1.ConditionTrue, dotsv1.RuntimePinnedReason, fmt.Sprintf("runs runtime ISO %s, which spec.runtimeImage pins: newer ones are not taken", running))
	case s.newestRuntime == "":
		// The host's images could not be listed: the condition stays as it was.
	case !home.OlderImage(running, s.newestRuntime):
		set(metav1.ConditionTrue, dotsv1.RuntimeCurrentReason, fmt.Sprintf("runs runtime ISO %s, the newest on host %s", running, r.HostName))
	default:
		set(metav1.ConditionFalse, dotsv1.RuntimeRestartPendingReason, fmt.Sprintf(
			"runs runtime ISO %s; %s is registered on host %s and is taken at the next start: `invisible-dots computer reboot %s -n %s` applies it now",
			running, s.newestRuntime, r.HostName, c.Name, c.Namespace))
	}
}

// recordAction emits the Event of the action this reconcile took and how
// it ended (it happened, whatever becomes of the status write).
func (r *Reconciler) recordAction(s *scope) {
	c := s.computer
	st := c.Status
	if s.decision.ExitedUnasked {
		// What was seen before any action: a start replaces s.obs.
		how := "QEMU exited without a stop being asked"
		if s.seen.StaleBoot {
			how = "the host restarted since QEMU was started"
		} else if s.seen.ExitStatus != "" {
			how += " (" + s.seen.ExitStatus + ")"
		}
		if s.seen.Fix != "" {
			how += "; " + s.seen.Fix
		}
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "Exited", "Observe", "%s%s", how, logSuffix(s.seen.LogTail))
	}
	if s.decision.StopDone {
		if s.prev.StopDeadline != nil && s.seen.ExitStatus == "exit status 0" {
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Stopped", "Stop", "the guest powered itself off")
		} else {
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Stopped", "Stop", "QEMU is gone%s", parens(s.seen.ExitStatus))
		}
	}
	switch s.acted {
	case actStart:
		switch {
		case s.actErr != nil && startFailedReason(st.StartFailure) == dotsv1.DiskFullReason:
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, dotsv1.DiskFullReason, "Start", "%s%s", st.StartFailure.Message, retryText(st.StartFailure))
		case s.actErr != nil:
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "StartFailed", "Start", "%s (failure %d in a row)%s", s.actErr.Error(), failCount(st.StartFailure), retryText(st.StartFailure))
		case s.decision.RebootHandled:
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Rebooted", "Start", "QEMU pid %d, guest port %d, images %s / %s", s.obs.PID, s.obs.GuestPort, st.GoldenImage, st.RuntimeImage)
		default:
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Started", "Start", "QEMU pid %d, guest port %d, images %s / %s", s.obs.PID, s.obs.GuestPort, st.GoldenImage, st.RuntimeImage)
		}
	case actStop:
		if s.obs.State != driver.Running {
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Stopped", "Stop", "the guest powered itself off")
		} else {
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Stopping", "Stop", "the guest was asked to power off; it is killed at %s if it has not", s.deadline.UTC().Format(time.RFC3339))
		}
	case actLeaveReady:
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Stopping", "LeaveReady", "%s", leavingReadyText(s.decision.StopReason))
	case actKill:
		switch {
		case s.actErr != nil:
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "KillFailed", "Kill", "%s", s.actErr.Error())
		case s.decision.NeverListened:
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "StartFailed", "Kill", "%s", failMessage(st.StartFailure))
		case s.decision.KillOverdue:
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "KillOverdue", "Kill", "QEMU pid %d outlived its SIGKILL for %s; killed again", s.seen.PID, killWait)
		case s.kill.WasRunning:
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "Killed", "Kill", "QEMU was killed: the guest did not power off in time%s", poweroffNote(s.poweroffErr))
		}
	}
}

// leavingReadyText says why a running VM's Dot leaves READY first.
func leavingReadyText(reason dotsv1.StopReason) string {
	switch reason {
	case dotsv1.StopIdle:
		return "going to sleep: the Dot leaves READY, then its engine prepares and the guest powers off"
	case dotsv1.StopUser:
		return "stopping for the person: the Dot leaves READY, then the guest powers off"
	}
	return "rebooting: the Dot leaves READY, then the guest powers off and the VM starts again"
}

func failMessage(f *dotsv1.StartFailure) string {
	if f == nil {
		return ""
	}
	return f.Message
}

func parens(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// poweroffNote says why the guest did not take the poweroff, when it did not.
func poweroffNote(err error) string {
	if err == nil {
		return ""
	}
	return " (the guest did not accept the poweroff: " + err.Error() + ")"
}

// recordTransition emits the Event of a status that was written: every
// change of state.
func (r *Reconciler) recordTransition(s *scope) {
	c := s.computer
	st := c.Status
	if st.State != s.prev.State && st.State != "" {
		typ := corev1.EventTypeNormal
		if st.State == dotsv1.ComputerError {
			typ = corev1.EventTypeWarning
		}
		note := fmt.Sprintf("%s -> %s", cmp.Or(string(s.prev.State), "(none)"), st.State)
		if s.prev.State == "" && st.State == dotsv1.ComputerRunning && s.acted == actNone {
			note += " (a running QEMU was adopted)"
		}
		r.Recorder.Eventf(c, nil, typ, "StateChanged", "Reconcile", "%s", note)
	}
}

func failCount(f *dotsv1.StartFailure) int32 {
	if f == nil {
		return 0
	}
	return f.ConsecutiveFailCount
}

func retryText(f *dotsv1.StartFailure) string {
	if f == nil || f.RetryAfter == nil {
		return ""
	}
	return fmt.Sprintf("; next start not before %s", f.RetryAfter.UTC().Format("15:04:05"))
}

func stoppedText(reason dotsv1.StopReason, strategy dotsv1.RunStrategy) string {
	switch reason {
	case dotsv1.StopUser:
		return "the VM was stopped by a person (runStrategy Halted); start it with `invisible-dots computer start` or set runStrategy OnDemand"
	case dotsv1.StopIdle:
		return "the VM sleeps (idle); work for its Dot starts it"
	case dotsv1.StopExited:
		if strategy == dotsv1.RunAlways {
			return "the VM exited without being asked; it is started again"
		}
		return "the VM exited without being asked; start it with `invisible-dots computer start`"
	}
	return "the VM is not running"
}

func errText(err error) string {
	if err == nil {
		return "not asked yet"
	}
	return err.Error()
}

// logSuffix quotes the end of QEMU's log and the serial console.
func logSuffix(tail string) string {
	tail = strings.TrimSpace(tail)
	if tail == "" {
		return ""
	}
	if len(tail) > maxTail {
		tail = "..." + tail[len(tail)-maxTail:]
	}
	return "\n" + tail
}

// shapeNote says when the running QEMU's CPUs or memory differ from the
// spec: they apply at the next start, so a person knows to reboot.
func shapeNote(c *dotsv1.Computer, obs driver.Observation) string {
	if obs.CPUs == 0 && obs.MemoryMiB == 0 {
		return "" // a QEMU of a record without its shape
	}
	cpus, mem := specShape(c)
	if obs.CPUs == cpus && obs.MemoryMiB == mem {
		return ""
	}
	return fmt.Sprintf("; it runs with %d CPUs and %d MiB, the spec says %d and %d MiB: reboot to apply (invisible-dots computer reboot %s)", obs.CPUs, obs.MemoryMiB, cpus, mem, c.Name)
}
