package heartbeat

import "testing"

func TestReadMachine(t *testing.T) {
	m, err := ReadMachine(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if m.CPUs < 1 || m.MemTotal < 1<<20 || m.MemAvailable <= 0 || m.MemAvailable > m.MemTotal || m.DiskTotal <= 0 || m.DiskFree > m.DiskTotal {
		t.Errorf("ReadMachine = %+v; want positive sizes with available <= total", m)
	}
}
