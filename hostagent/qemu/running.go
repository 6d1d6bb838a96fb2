package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

// RuntimesInUse is the runtime ISO version of every VM of the home h whose
// QEMU runs now, read from the VMs' records alone: a record of this boot
// whose process is alive with the recorded start time. It changes nothing
// and needs no driver, so `image build` can say how many running Dots a new
// runtime ISO waits for (a VM takes the newest at its next start).
func RuntimesInUse(h home.Layout) (map[home.VMID]string, error) {
	now, err := home.CurrentBoot()
	if err != nil {
		return nil, err
	}
	namespaces, err := os.ReadDir(h.VMs())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", h.VMs(), err)
	}
	out := map[home.VMID]string{}
	for _, ns := range namespaces {
		names, err := os.ReadDir(filepath.Join(h.VMs(), ns.Name()))
		if err != nil {
			continue
		}
		for _, n := range names {
			id := home.VMID{Namespace: ns.Name(), Name: n.Name()}
			if id.Validate() != nil {
				continue
			}
			rec, err := readRecord(h.VM(id).QEMUJSON())
			if err != nil || !now.SameBoot(rec.Stamp) {
				continue
			}
			info, err := readProc(rec.PID)
			if err != nil || !info.Exists || (rec.ProcStartTicks != 0 && info.StartTicks != rec.ProcStartTicks) {
				continue
			}
			out[id] = rec.RuntimeImage
		}
	}
	return out, nil
}
